//! The shutdown budget: one deadline for every step.

#![allow(clippy::expect_used, reason = "test code fails loudly")]

use super::{ProsodyClient, close};
use crate::directory::ClientDirectory;
use crate::testing::Noop;
use prosody_core::broker::{BrokerError, Delivery, OutgoingRecord, Producer};
use prosody_core::peer::{PeerEntry, PeerId, Publication};
use prosody_core::store::{PeerDirectory, StoreError};
use prosody_core::telemetry::{Lifecycle, ProducerSink, TelemetryEvent, TelemetrySink};
use prosody_core::{Demand, Timestamp};
use prosody_memory::{MemoryBroker, MemoryPeerDirectory};
use std::time::Duration;
use tokio::time::Instant;

/// A producer whose sends never complete.
#[derive(Clone)]
struct Stuck;

impl Producer for Stuck {
    async fn send(&self, _: OutgoingRecord, _: Duration) -> Result<Delivery, BrokerError> {
        std::future::pending().await
    }
}

/// A drain that took 27 s of a 30 s budget leaves the telemetry flush
/// 3 s, not a budget of its own, when the telemetry producer hangs.
#[tokio::test(start_paused = true)]
async fn the_drain_and_the_telemetry_flush_share_one_budget() {
    let sink = ProducerSink::spawn(Stuck, "lifecycle").expect("a runtime");
    sink.emit(TelemetryEvent {
        lifecycle: Lifecycle::Dispatched,
        kind: "message",
        topic: "orders".into(),
        partition: 0,
        offset: Some(1),
        key: "k".into(),
        attempt: 1,
        demand: Demand::Normal,
        at: Timestamp::from_millis(0),
        fire_time: None,
    });
    let start = Instant::now();
    let drain = tokio::time::sleep(Duration::from_secs(27));
    close(|_| drain, Some(&sink), Duration::from_secs(30)).await;
    assert_eq!(start.elapsed(), Duration::from_secs(30));
    assert_eq!(sink.pending(), 1);
}

/// A peer directory whose deletions never finish.
#[derive(Clone, Default)]
struct Undeletable(MemoryPeerDirectory);

impl PeerDirectory for Undeletable {
    async fn register(
        &self,
        peer: PeerId,
        entry: &PeerEntry,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.0.register(peer, entry, ttl).await
    }

    async fn lookup(&self, peer: PeerId) -> Result<Option<PeerEntry>, StoreError> {
        self.0.lookup(peer).await
    }

    async fn deregister(&self, _: PeerId) -> Result<(), StoreError> {
        std::future::pending().await
    }

    async fn publish(&self, publication: &Publication) -> Result<(), StoreError> {
        self.0.publish(publication).await
    }

    async fn publication(
        &self,
        subsystem: &str,
        collection: &str,
    ) -> Result<Option<Publication>, StoreError> {
        self.0.publication(subsystem, collection).await
    }
}

/// A mock client consuming `t`, with `budget` to shut down.
async fn consuming(budget: Duration) -> ProsodyClient {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).expect("a topic");
    let client = ProsodyClient::builder()
        .broker(broker)
        .group_id("svc")
        .source_system("svc-test")
        .subscribed_topics(["t"])
        .peer_bind_address("127.0.0.1:0".parse().expect("an address"))
        .shutdown_timeout(budget)
        .build()
        .await
        .expect("a client");
    client.subscribe(Noop).await.expect("a subscription");
    client
}

/// With an answer whose send never completes and a directory whose
/// deletion hangs, shutdown still returns at `shutdown_timeout`: the
/// answers, the deletion and the flush share the drain's deadline, none
/// gets a budget of its own.
#[tokio::test(start_paused = true)]
async fn answers_and_the_peer_entry_keep_to_the_shutdown_deadline() {
    let budget = Duration::from_secs(10);
    let client = consuming(budget).await;
    let requests = &client.inner.requests;
    requests
        .listen_in(&ClientDirectory::new(Undeletable::default()))
        .await
        .expect("a registered endpoint");
    let (_, sending) = requests.route();
    sending.spawn(std::future::pending::<()>());

    let start = Instant::now();
    client.shutdown().await;
    assert_eq!(start.elapsed(), budget);
}
