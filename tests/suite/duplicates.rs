//! What the README's Stores section promises of dedup records and deferred
//! retries, on the in-memory broker and stores under a paused clock: a
//! record that succeeded only on a deferred retry leaves a dedup record in
//! the store, so a duplicate of it reaching a later member (whose own dedup
//! cache is empty, as after a restart) is skipped, not handled again.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use crate::support;

use prosody::broker::{Broker, OutgoingRecord, Producer};
use prosody::{
    MemoryBroker, MemoryDedupStore, MemoryDeferStore, MemoryStores, MemoryTimerStore, ProsodyClient,
};
use prosody_core::JsonCodec;
use std::time::Duration;
use support::{Probe, Script, TestHandler};

const TOPIC: &str = "events";

fn script(failures: u32) -> Script {
    Script {
        key: "k".into(),
        latency_ms: 0,
        failures,
        id: Some("order-1".into()),
    }
}

async fn produce(broker: &MemoryBroker, script: &Script) {
    let payload = serde_json::to_vec(script).unwrap();
    let record = OutgoingRecord::new(TOPIC, script.key.clone(), payload);
    let producer = broker.producer().unwrap();
    producer.send(record, Duration::from_secs(1)).await.unwrap();
}

/// A pipeline member over `stores`, with a dedup cache of its own.
async fn member(
    broker: &MemoryBroker,
    stores: MemoryStores,
    probe: &Probe,
    id: u32,
) -> ProsodyClient<JsonCodec<Script>> {
    let client = ProsodyClient::builder()
        .codec(JsonCodec::<Script>::new())
        .broker(broker.clone())
        .stores(stores)
        .group_id("group")
        .subscribed_topics([TOPIC])
        .build()
        .await
        .unwrap();
    client
        .subscribe(TestHandler::new(probe.clone(), id))
        .await
        .unwrap();
    client
}

#[tokio::test(start_paused = true)]
async fn a_record_that_succeeded_on_a_deferred_retry_leaves_a_dedup_record() {
    let broker = MemoryBroker::new();
    broker.create_topic(TOPIC, 1).unwrap();
    let (timers, deferred, dedup) = (
        MemoryTimerStore::new(),
        MemoryDeferStore::new(),
        MemoryDedupStore::new(),
    );
    let stores = || MemoryStores::from_parts(timers.clone(), deferred.clone(), dedup.clone());
    let probe = Probe::default();

    // The first attempt fails: the record is deferred, and its retry from
    // the backlog succeeds.
    produce(&broker, &script(1)).await;
    let first = member(&broker, stores(), &probe, 1).await;
    tokio::time::timeout(Duration::from_secs(3600), probe.wait_handled(1))
        .await
        .expect("handled on its deferred retry");
    assert_eq!(
        probe.lock().attempts.get(&(0, 0)),
        Some(&2),
        "it succeeded on a retry"
    );
    first.shutdown().await;

    // A duplicate (same key and id) reaches a member with an empty cache.
    produce(&broker, &script(0)).await;
    let second = member(&broker, stores(), &probe, 2).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    second.shutdown().await;
    let successes = probe.lock().successes.clone();
    assert_eq!(
        successes,
        [("k".to_owned(), 0, 0)],
        "the duplicate at offset 1 was handled again"
    );
    assert_eq!(
        broker.committed_offset("group", &prosody::broker::TopicPartition::new(TOPIC, 0)),
        Some(2),
        "the duplicate settled"
    );
}
