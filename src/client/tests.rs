//! The shutdown budget, and the warning of a client dropped unshut.

#![allow(clippy::expect_used, reason = "test code fails loudly")]

use super::{ProsodyClient, close};
use crate::directory::ClientDirectory;
use prosody_core::broker::{
    Broker, BrokerError, Consumer, ConsumerConfig, ConsumerEvent, Delivery, OutgoingRecord,
    Producer, Record, TopicPartition,
};
use prosody_core::peer::{PeerEntry, PeerId, Publication};
use prosody_core::store::{PeerDirectory, StoreError};
use prosody_core::telemetry::{Lifecycle, ProducerSink, TelemetryEvent, TelemetrySink};
use prosody_core::{
    Context, Demand, EventHandler, Excise, HandlerError, Message, Timer, Timestamp,
};
use prosody_memory::{MemoryBroker, MemoryConsumer, MemoryPeerDirectory, MemoryProducer};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
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

/// Handles everything at once.
struct Idle;

impl EventHandler for Idle {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, _: Message<Value>) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
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
    client.subscribe(Idle).await.expect("a subscription");
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

/// An in-memory broker whose members never finish leaving their group.
#[derive(Clone)]
struct Unleaving(MemoryBroker);

/// A member whose close never finishes.
struct Clinging(MemoryConsumer);

impl Broker for Unleaving {
    type Consumer = Clinging;
    type Producer = MemoryProducer;

    fn durable(&self) -> bool {
        false
    }

    async fn consumer(&self, config: &ConsumerConfig) -> Result<Clinging, BrokerError> {
        Ok(Clinging(self.0.consumer(config).await?))
    }

    fn producer(&self) -> Result<MemoryProducer, BrokerError> {
        self.0.producer()
    }

    async fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, BrokerError> {
        self.0.read(partition, offset).await
    }

    async fn partitions(&self, topic: &str) -> Result<Option<i32>, BrokerError> {
        self.0.partitions(topic).await
    }
}

impl Consumer for Clinging {
    async fn poll(&mut self) -> Result<ConsumerEvent, BrokerError> {
        self.0.poll().await
    }

    fn store_offset(&mut self, partition: &TopicPartition, offset: i64) -> Result<(), BrokerError> {
        self.0.store_offset(partition, offset)
    }

    async fn commit(&mut self) -> Result<(), BrokerError> {
        self.0.commit().await
    }

    fn pause(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        self.0.pause(partition)
    }

    fn resume(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        self.0.resume(partition)
    }

    async fn committed(&mut self, partition: &TopicPartition) -> Result<Option<i64>, BrokerError> {
        self.0.committed(partition).await
    }

    async fn close(self) {
        let _member = self;
        std::future::pending::<()>().await;
    }
}

/// Starts each record's handling, tells of it, and never ends it.
struct Hangs(mpsc::UnboundedSender<()>);

impl EventHandler for Hangs {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, _: Message<Value>) -> Result<(), HandlerError> {
        let _ = self.0.send(());
        std::future::pending().await
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// Everything logged while it is the default subscriber, as text.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("the log")).into_owned()
    }

    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + 'static {
        let logs = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || logs.clone())
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .finish()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("the log").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A drain that takes the whole budget, then a consumer that never
/// finishes leaving: shutdown stops waiting for the leave 2 s past the
/// budget (the floor the leave gets however late it starts), and says
/// what that means for the group.
#[tokio::test(start_paused = true)]
async fn a_consumer_that_never_leaves_holds_shutdown_up_only_to_its_floor() {
    let logs = Logs::default();
    let _default = tracing::subscriber::set_default(logs.subscriber());
    let budget = Duration::from_secs(10);
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).expect("a topic");
    let client = ProsodyClient::builder()
        .broker(Unleaving(broker))
        .group_id("svc")
        .source_system("svc-test")
        .subscribed_topics(["t"])
        .shutdown_timeout(budget)
        .build()
        .await
        .expect("a client");
    let (started, mut handling) = mpsc::unbounded_channel();
    client
        .subscribe(Hangs(started))
        .await
        .expect("a subscription");
    client
        .send("t", "k", &serde_json::json!({}))
        .await
        .expect("a send");
    tokio::time::timeout(Duration::from_secs(60), handling.recv())
        .await
        .expect("the handler started in time");

    let start = Instant::now();
    tokio::time::timeout(budget * 10, client.shutdown())
        .await
        .expect("shutdown returned");
    assert_eq!(start.elapsed(), budget + Duration::from_secs(2));
    let logged = logs.text();
    assert!(
        logged.contains("did not leave its group")
            && logged.contains("session.timeout.ms")
            && logged.contains("the offsets were committed before"),
        "{logged}"
    );
}

/// Dropping the last handle of a consuming client without shutdown warns,
/// counting the partitions held and their unsettled records; after
/// shutdown, or for a client never subscribed, a drop says nothing.
#[tokio::test(start_paused = true)]
async fn a_client_dropped_unshut_says_what_it_left() {
    let logs = Logs::default();
    let _default = tracing::subscriber::set_default(logs.subscriber());
    let client = consuming(Duration::from_secs(10)).await;
    client.unsubscribe().await.expect("an unsubscription");
    let (started, mut handling) = mpsc::unbounded_channel();
    client
        .subscribe(Hangs(started))
        .await
        .expect("a subscription");
    for n in 0..3 {
        client
            .send("t", "k", &serde_json::json!({ "n": n }))
            .await
            .expect("a send");
    }
    tokio::time::timeout(Duration::from_secs(60), handling.recv())
        .await
        .expect("the handler started in time");
    let clone = client.clone();
    drop(client);
    assert_eq!(logs.text(), "", "a clone still holds the client");
    drop(clone);
    let logged = logs.text();
    assert!(
        logged.contains("dropped without shutdown()")
            && logged.contains("subscribed=true partitions=1 unsettled=3 telemetry=0 answers=0"),
        "{logged}"
    );

    let logs = Logs::default();
    let _default = tracing::subscriber::set_default(logs.subscriber());
    let shut = consuming(Duration::from_secs(10)).await;
    shut.shutdown().await;
    drop(shut);
    let never = ProsodyClient::builder()
        .broker(MemoryBroker::new())
        .group_id("svc")
        .source_system("svc-test")
        .build()
        .await
        .expect("a client");
    drop(never);
    assert_eq!(logs.text(), "");
}
