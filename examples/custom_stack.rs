//! A custom stack: the pipeline's stages from the client's configured
//! layers, plus a standard tower middleware (a concurrency limit of two
//! handler calls) between the retry and the scheduler. Runs in mock mode.
//!
//! Run with `cargo run --example custom_stack`.

use prosody::{Context, EventHandler, Excise, HandlerError, Message, ProsodyClient, Timer};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tower::ServiceBuilder;
use tower::limit::ConcurrencyLimitLayer;

/// Records how many calls run at once, and reports each key handled.
struct Worker {
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    handled: mpsc::UnboundedSender<String>,
}

impl EventHandler for Worker {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, message: Message<Value>) -> Result<(), HandlerError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.handled.send(message.key.to_string())?;
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = ProsodyClient::builder()
        .mock(true)
        .group_id("custom-stack")
        .source_system("custom-stack-producer")
        .subscribed_topics(["jobs"])
        .build()
        .await?;

    let (handled, mut seen) = mpsc::unbounded_channel();
    let peak = Arc::new(AtomicUsize::new(0));
    let worker = Worker {
        running: Arc::default(),
        peak: Arc::clone(&peak),
        handled,
    };
    let layers = client.layers();
    let stack = ServiceBuilder::new()
        .layer(layers.dedup())
        .layer(layers.retry())
        .layer(layers.monopolization())
        .layer(ConcurrencyLimitLayer::new(2))
        .layer(layers.shutdown())
        .layer(layers.scheduler())
        .layer(layers.timeout())
        .layer(layers.telemetry())
        .service(layers.handler(worker));
    client.subscribe_with(stack).await?;

    let keys: Vec<String> = (0..10).map(|n| format!("job-{n}")).collect();
    for (n, key) in keys.iter().enumerate() {
        client
            .send("jobs", key.as_str(), &json!({ "id": n, "type": "job" }))
            .await?;
    }
    for _ in &keys {
        let key = tokio::time::timeout(Duration::from_secs(10), seen.recv())
            .await?
            .ok_or("the handler stopped")?;
        println!("handled {key}");
    }
    client.shutdown().await;
    println!(
        "{} jobs handled, at most {} at once (limit 2)",
        keys.len(),
        peak.load(Ordering::SeqCst)
    );
    Ok(())
}
