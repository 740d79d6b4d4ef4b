//! Requests to named subsystems, in mock mode: a billing and an inventory
//! service answer orders; a caller that subscribes to nothing asks both and
//! waits for their answers, then reads what billing charged from its
//! published state.
//!
//! `cargo run --example request`

use prosody::state::ValueDef;
use prosody::{
    Context, EventHandler, Excise, HandlerError, Message, Outcome, ProsodyClient, Timer,
};
use serde_json::{Value, json};
use std::time::Duration;

/// What billing charged for each order, published for other clients.
static CHARGED: ValueDef<u64> = ValueDef::new("charged").published(true);

/// Answers an order with what its subsystem did with it.
struct Service {
    subsystem: &'static str,
}

impl EventHandler for Service {
    type Payload = Value;
    type Output = Value;

    async fn on_message(
        &self,
        context: Context,
        order: Message<Value>,
    ) -> Result<Value, HandlerError> {
        let quantity = order.payload["quantity"].as_u64().unwrap_or(0);
        if quantity == 0 {
            // A permanent failure: its message is the subsystem's answer.
            return Err(HandlerError::permanent("an order needs a quantity"));
        }
        if self.subsystem == "billing" {
            // Committed with the attempt, before the answer is sent.
            context.state(&CHARGED)?.set(&(quantity * 5)).await?;
            return Ok(json!({ "charged": quantity * 5 }));
        }
        Ok(json!({ "reserved": quantity }))
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
        .state_collections([CHARGED.spec()])
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

    // Billing's published state: what it committed for the order.
    let charged = caller.state("billing", &CHARGED).await?;
    println!(
        "billing charged order-1: {:?}",
        charged.get("order-1").await?
    );
    assert_eq!(charged.get("order-1").await?, Some(15));

    caller.shutdown().await;
    for service in services {
        service.shutdown().await;
    }
    Ok(())
}
