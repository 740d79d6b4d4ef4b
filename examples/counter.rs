//! Keyed state: a counter per key, in mock mode (the in-memory broker and
//! stores), so it runs with no server.
//!
//! Each message adds one to its key's count. The write lands only if the
//! handler succeeds, in one write with the marker that the message was
//! applied: a failed attempt counts nothing, and a message delivered again
//! after a crash is not counted twice. An excise forgets the key.
//!
//! Run with `cargo run --example counter`.

use prosody::state::ValueDef;
use prosody::{Context, EventHandler, Excise, HandlerError, Message, ProsodyClient, Timer};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::mpsc;

/// The count of messages per key, forgotten 30 days after its last change.
static COUNT: ValueDef<u64> = ValueDef::new("count").ttl(Duration::from_secs(30 * 86_400));

struct Counter {
    counted: mpsc::UnboundedSender<(String, u64)>,
}

impl EventHandler for Counter {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, context: Context, _: Message<Value>) -> Result<(), HandlerError> {
        let count = context.state(&COUNT)?;
        let next = count.get().await?.unwrap_or(0) + 1;
        count.set(&next).await?;
        self.counted.send((context.key().to_string(), next))?;
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, context: Context, _: Excise) -> Result<(), HandlerError> {
        // Clears every registered collection of the key when the excise
        // succeeds.
        context.clear_state()?;
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = ProsodyClient::builder()
        .mock(true)
        .group_id("counter")
        .source_system("counter-producer")
        .subscribed_topics(["clicks"])
        .state_collections([COUNT.spec()])
        .build()
        .await?;
    let (counted, mut counts) = mpsc::unbounded_channel();
    client.subscribe(Counter { counted }).await?;

    let clicks = ["ada", "grace", "ada", "alan", "ada", "grace"];
    for user in clicks {
        client
            .send("clicks", user, &json!({ "type": "click" }))
            .await?;
    }
    for _ in clicks {
        let (user, count) = tokio::time::timeout(Duration::from_secs(10), counts.recv())
            .await?
            .ok_or("the handler stopped")?;
        println!("{user}: {count}");
    }
    client.shutdown().await;
    Ok(())
}
