//! The quickstart: a handler that logs each message, in mock mode (the
//! in-memory broker), so it runs with no server.
//!
//! Run with `cargo run --example quickstart`.

use prosody::{Context, EventHandler, Excise, HandlerError, Message, ProsodyClient, Timer};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::mpsc;

/// Logs every event and reports each message's key on a channel.
struct Logger {
    handled: mpsc::UnboundedSender<String>,
}

impl EventHandler for Logger {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<(), HandlerError> {
        println!(
            "handled {} partition {} offset {}: {}",
            context.key(),
            message.partition,
            message.offset,
            message.payload
        );
        self.handled.send(message.key.to_string())?;
        Ok(())
    }

    async fn on_timer(&self, _context: Context, timer: Timer) -> Result<(), HandlerError> {
        println!("timer for {} at {:?}", timer.key, timer.time);
        Ok(())
    }

    async fn on_excise(&self, _context: Context, excise: Excise) -> Result<(), HandlerError> {
        println!("excise {}", excise.key);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Logs at `info`, or as PROSODY_LOG says (for example `prosody_core=debug`);
    // spans are exported when OTEL_EXPORTER_OTLP_ENDPOINT is set.
    prosody::otel::install()?;

    let client = ProsodyClient::builder()
        .mock(true)
        .group_id("quickstart")
        // Records whose source-system header equals the group id are skipped;
        // this client consumes what it sends itself, so it names another.
        .source_system("quickstart-producer")
        .subscribed_topics(["greetings"])
        .build()
        .await?;

    let (handled, mut seen) = mpsc::unbounded_channel();
    client.subscribe(Logger { handled }).await?;

    let users = ["ada", "grace", "alan"];
    for (n, user) in users.iter().enumerate() {
        client
            .send(
                "greetings",
                *user,
                &json!({ "id": n, "type": "greeting", "text": format!("hello, {user}") }),
            )
            .await?;
    }

    for _ in users {
        tokio::time::timeout(Duration::from_secs(10), seen.recv())
            .await?
            .ok_or("the handler stopped")?;
    }
    client.shutdown().await;
    println!("all {} messages handled; shut down", users.len());
    // Exports what is pending; it blocks, so off the async workers.
    tokio::task::spawn_blocking(prosody::otel::shutdown_telemetry).await??;
    Ok(())
}
