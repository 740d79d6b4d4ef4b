//! A graceful hand-off on the in-memory broker, under a paused clock: a
//! member that unsubscribes finishes the records it already holds (within
//! its shutdown budget) and commits them, so the partition's next owner
//! handles none of them again.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::{Broker, OutgoingRecord, Producer, TopicPartition};
use prosody::{
    Context, EventHandler, Excise, HandlerError, MemoryBroker, Message, ProsodyClient, Timer,
};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Takes a second per record; logs (member, offset) of each success.
#[derive(Clone)]
struct Slow {
    member: u32,
    log: Arc<Mutex<Vec<(u32, i64)>>>,
}

impl EventHandler for Slow {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, message: Message<Value>) -> Result<(), HandlerError> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.log.lock().unwrap().push((self.member, message.offset));
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

async fn member(
    broker: &MemoryBroker,
    id: u32,
    log: &Arc<Mutex<Vec<(u32, i64)>>>,
) -> ProsodyClient {
    let client = ProsodyClient::builder()
        .memory_broker(broker.clone())
        .group_id("svc")
        .subscribed_topics(["t"])
        .max_concurrency(1)
        .build()
        .await
        .unwrap();
    let handler = Slow {
        member: id,
        log: Arc::clone(log),
    };
    client.subscribe(handler).await.unwrap();
    client
}

/// Ten records of ten keys wait for the one permit when the member
/// unsubscribes: it still handles all ten (10 s, within 90% of the 30 s
/// budget), commits to the end, and the next member receives none.
#[tokio::test(start_paused = true)]
async fn an_unsubscribing_member_finishes_what_it_holds_before_letting_go() {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).unwrap();
    let producer = broker.producer().unwrap();
    for n in 0..10 {
        let record = OutgoingRecord::new("t", format!("key-{n}"), "{}");
        producer.send(record, Duration::from_secs(1)).await.unwrap();
    }
    let log = Arc::default();
    let first = member(&broker, 1, &log).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    first.unsubscribe().await.unwrap();
    let tp = TopicPartition::new("t", 0);
    assert_eq!(broker.committed_offset("svc", &tp), Some(10));
    let next = member(&broker, 2, &log).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    next.shutdown().await;
    first.shutdown().await;
    let log = log.lock().unwrap();
    assert!(log.iter().all(|(member, _)| *member == 1), "{log:?}");
    let mut offsets: Vec<i64> = log.iter().map(|(_, offset)| *offset).collect();
    offsets.sort_unstable();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>());
}
