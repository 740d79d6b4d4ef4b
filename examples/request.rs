//! Requests to named subsystems, in mock mode: a billing and an inventory
//! service answer orders; a caller that subscribes to nothing asks both and
//! waits for their answers.
//!
//! `cargo run --example request`

use prosody::{
    Context, EventHandler, Excise, HandlerError, Message, Outcome, ProsodyClient, Timer,
};
use serde_json::{Value, json};
use std::time::Duration;

/// Answers an order with what its subsystem did with it.
struct Service {
    subsystem: &'static str,
}

impl EventHandler for Service {
    type Payload = Value;
    type Output = Value;

    async fn on_message(&self, _: Context, order: Message<Value>) -> Result<Value, HandlerError> {
        let quantity = order.payload["quantity"].as_u64().unwrap_or(0);
        if quantity == 0 {
            // A permanent failure: its message is the subsystem's answer.
            return Err(HandlerError::permanent("an order needs a quantity"));
        }
        Ok(match self.subsystem {
            "billing" => json!({ "charged": quantity * 5 }),
            _ => json!({ "reserved": quantity }),
        })
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, excise: Excise) -> Result<Value, HandlerError> {
        Ok(json!({ "forgotten": &*excise.key }))
    }
}

async fn service(subsystem: &'static str) -> Result<ProsodyClient, Box<dyn std::error::Error>> {
    let client = ProsodyClient::builder()
        .mock(true)
        .group_id(subsystem)
        .subsystem(subsystem)
        .subscribed_topics(["orders"])
        .build()
        .await?;
    client.subscribe(Service { subsystem }).await?;
    Ok(client)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let services = [service("billing").await?, service("inventory").await?];
    let caller = ProsodyClient::builder()
        .mock(true)
        .group_id("checkout")
        .build()
        .await?;

    let timeout = Duration::from_secs(5);
    let subsystems = ["billing", "inventory"];
    let outcomes = caller
        .request::<Value>(
            "orders",
            "order-1",
            &json!({ "quantity": 3 }),
            &subsystems,
            timeout,
        )
        .await?;
    for (subsystem, outcome) in &outcomes {
        match outcome {
            Outcome::Success(answer) => println!("{subsystem}: {answer}"),
            Outcome::Failure(error) => println!("{subsystem} failed: {error}"),
        }
    }
    assert_eq!(
        outcomes["billing"],
        Outcome::Success(json!({ "charged": 15 }))
    );

    let refused = caller
        .request::<Value>("orders", "order-2", &json!({}), &["billing"], timeout)
        .await?;
    println!(
        "billing on an order without quantity: {:?}",
        refused["billing"]
    );

    let excised = caller
        .request_excise::<Value>("orders", "order-1", &["inventory"], timeout)
        .await?;
    println!("inventory on the excise: {:?}", excised["inventory"]);

    caller.shutdown().await;
    for service in services {
        service.shutdown().await;
    }
    Ok(())
}
