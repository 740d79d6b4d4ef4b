//! Timers: each message schedules a follow-up for its key two seconds
//! later, and the handler prints when it fires. Mock mode: no server.
//!
//! Run with `cargo run --example timers`.

use prosody::{
    Context, EventHandler, Excise, HandlerError, Message, ProsodyClient, Timer, Timestamp,
};
use serde_json::{Value, json};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// Wall-clock milliseconds, for printing.
fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Schedules a follow-up two seconds after each message.
struct FollowUp {
    fired: mpsc::UnboundedSender<String>,
}

impl EventHandler for FollowUp {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<(), HandlerError> {
        let follow_up = Timestamp::from_millis(now_millis() + 2_000);
        context.schedule(follow_up)?;
        println!(
            "{}: message {}; follow-up at {}",
            context.key(),
            message.payload,
            follow_up.as_millis()
        );
        Ok(())
    }

    async fn on_timer(&self, _context: Context, timer: Timer) -> Result<(), HandlerError> {
        let late = now_millis() - timer.time.as_millis();
        println!("{}: follow-up fired {late} ms after its time", timer.key);
        self.fired.send(timer.key.to_string())?;
        Ok(())
    }

    async fn on_excise(&self, _context: Context, _excise: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = ProsodyClient::builder()
        .mock(true)
        .group_id("timers")
        .source_system("timers-producer")
        .subscribed_topics(["orders"])
        .build()
        .await?;
    let (fired, mut seen) = mpsc::unbounded_channel();
    client.subscribe(FollowUp { fired }).await?;

    let orders = ["order-1", "order-2"];
    for order in orders {
        client
            .send(
                "orders",
                order,
                &json!({ "id": order, "type": "order.placed" }),
            )
            .await?;
    }
    for _ in orders {
        tokio::time::timeout(Duration::from_secs(30), seen.recv())
            .await?
            .ok_or("the handler stopped")?;
    }
    client.shutdown().await;
    println!("every follow-up fired; shut down");
    Ok(())
}
