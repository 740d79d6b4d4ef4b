//! One side of a request between processes, for the Python binding's
//! suite (and anyone who wants to see two languages talk): the Kafka and
//! Cassandra come from the `PROSODY_*` variables.
//!
//! - `subsystem answer NAME TOPIC`: a service that answers the requests
//!   naming `NAME` with `{"answered_by": "rust", "key": ...}`; it prints
//!   `ready` once it consumes, and stops when its standard input closes.
//! - `subsystem ask NAME TOPIC KEY`: asks `NAME` about `KEY` and prints
//!   the outcome as one JSON line.
//!
//! `cargo run --example subsystem -- ask inventory orders order-1`

use prosody::{
    Context, EventHandler, Excise, HandlerError, Message, Outcome, ProsodyClient, Timer,
};
use serde_json::{Value, json};
use std::io::Read;
use std::time::Duration;

/// Answers with the language it is written in and the key.
struct Answerer;

impl EventHandler for Answerer {
    type Payload = Value;
    type Output = Value;

    async fn on_message(&self, _: Context, message: Message<Value>) -> Result<Value, HandlerError> {
        Ok(json!({ "answered_by": "rust", "key": &*message.key }))
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, excise: Excise) -> Result<Value, HandlerError> {
        Ok(json!({ "answered_by": "rust", "excised": &*excise.key }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["answer", name, topic] => {
            let client = ProsodyClient::builder()
                .group_id(name)
                .subsystem(name)
                .source_system(format!("{name}-answers"))
                .subscribed_topics([topic])
                .disable_probe()
                .build()
                .await?;
            client.subscribe(Answerer).await?;
            println!("ready");
            // Stops when the parent closes the pipe (or dies).
            tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await??;
            client.shutdown().await;
        }
        ["ask", name, topic, key] => {
            let client = ProsodyClient::builder()
                .group_id(format!("{name}-asker"))
                .disable_probe()
                .build()
                .await?;
            let outcomes = client
                .request::<Value>(
                    topic,
                    key,
                    &json!({ "asked_by": "rust" }),
                    &[name],
                    Duration::from_secs(30),
                )
                .await?;
            let line = match &outcomes[name] {
                Outcome::Success(value) => json!({ "success": value }),
                Outcome::Failure(error) => json!({ "failure": error.to_string() }),
            };
            println!("{line}");
            client.shutdown().await;
        }
        _ => {
            return Err("usage: subsystem answer NAME TOPIC | subsystem ask NAME TOPIC KEY".into());
        }
    }
    Ok(())
}
