//! The whole client on Kafka: the pipeline preset (in-memory stores)
//! against librdkafka's in-process mock cluster, in real time.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::{
    Broker, Consumer, ConsumerConfig, ConsumerEvent, OutgoingRecord, Producer, TopicPartition,
};
use prosody::{
    Context, EventHandler, Excise, HandlerError, KafkaBroker, MemoryStores, Message, ProsodyClient,
    Timer,
};
use prosody_kafka::mock::MockKafka;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

const TOPIC: &str = "orders";
const GROUP: &str = "order-service";
const PARTITIONS: i32 = 4;
const DEADLINE: Duration = Duration::from_secs(60);

/// Records each key's sequence numbers as handled.
#[derive(Clone, Default)]
struct Recorder {
    handled: Arc<Mutex<HashMap<String, Vec<u64>>>>,
    progress: Arc<Notify>,
}

impl Recorder {
    fn count(&self) -> usize {
        self.handled.lock().unwrap().values().map(Vec::len).sum()
    }

    async fn wait_for(&self, total: usize) {
        loop {
            let notified = self.progress.notified();
            if self.count() >= total {
                return;
            }
            notified.await;
        }
    }
}

impl EventHandler for Recorder {
    type Payload = Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> Result<(), HandlerError> {
        let n = message.payload["n"].as_u64().unwrap_or_default();
        // Every third record fails once: deferred, then retried.
        if n.is_multiple_of(3) && context.attempt() == 1 {
            return Err(HandlerError::transient("first attempt fails"));
        }
        self.handled
            .lock()
            .unwrap()
            .entry(message.key.to_string())
            .or_default()
            .push(n);
        self.progress.notify_waiters();
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// Keyed records over several partitions are all handled, in order per
/// key (some after a deferral), and the group's committed offsets reach
/// the end of every partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_handles_every_record_in_key_order_and_commits_to_the_end() {
    let cluster = MockKafka::start(1).unwrap();
    cluster.create_topic(TOPIC, PARTITIONS).unwrap();
    let broker = KafkaBroker::new(cluster.config().unwrap());
    let producer = broker.producer().unwrap();
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    let total = 120u64;
    for n in 0..total {
        let key = format!("customer-{}", n % 12);
        let payload = json!({"id": format!("order-{n}"), "type": "order.placed", "n": n});
        let record = OutgoingRecord::new(TOPIC, key, serde_json::to_vec(&payload).unwrap());
        let delivery = producer.send(record, Duration::from_secs(5)).await.unwrap();
        let end = ends.entry(delivery.partition).or_default();
        *end = (*end).max(delivery.offset + 1);
    }

    let client = ProsodyClient::builder()
        .bootstrap_servers([cluster.bootstrap_servers()])
        // Stores in memory, whatever PROSODY_CASSANDRA_NODES says.
        .stores(MemoryStores::new())
        .kafka_property("session.timeout.ms", "3000")
        .kafka_property("heartbeat.interval.ms", "500")
        .group_id(GROUP)
        .subscribed_topics([TOPIC])
        .build()
        .await
        .unwrap();
    let recorder = Recorder::default();
    client.subscribe(recorder.clone()).await.unwrap();
    tokio::time::timeout(DEADLINE, recorder.wait_for(usize::try_from(total).unwrap()))
        .await
        .expect("every record handled");
    client.shutdown().await;

    let handled = recorder.handled.lock().unwrap().clone();
    assert_eq!(handled.len(), 12);
    for (key, sequence) in &handled {
        let mut sorted = sequence.clone();
        sorted.sort_unstable();
        assert_eq!(sequence, &sorted, "{key} out of order");
        assert_eq!(
            sequence.len(),
            10,
            "{key} handled {} records",
            sequence.len()
        );
    }

    // A new member of the group reads the committed offsets.
    let mut probe = broker
        .consumer(&ConsumerConfig {
            group_id: GROUP.to_owned(),
            topics: vec![TOPIC.into()],
        })
        .await
        .unwrap();
    for (partition, end) in ends {
        let committed = probe
            .committed(&TopicPartition::new(TOPIC, partition))
            .await
            .unwrap();
        assert_eq!(committed, Some(end), "partition {partition}");
    }
    probe.close().await;
}

/// On Kafka, each handler call's lifecycle reaches the telemetry topic:
/// a dispatch and an outcome per attempt, the failed first attempt with its
/// category.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_events_reach_the_telemetry_topic() {
    const EVENTS: &str = "order-telemetry";
    let cluster = MockKafka::start(1).unwrap();
    cluster.create_topic(TOPIC, 1).unwrap();
    cluster.create_topic(EVENTS, 1).unwrap();
    let broker = KafkaBroker::new(cluster.config().unwrap());
    let producer = broker.producer().unwrap();
    for n in 1..=3u64 {
        let payload = json!({"id": format!("order-{n}"), "type": "order.placed", "n": n});
        let record =
            OutgoingRecord::new(TOPIC, "customer-1", serde_json::to_vec(&payload).unwrap());
        producer.send(record, Duration::from_secs(5)).await.unwrap();
    }
    let client = ProsodyClient::builder()
        .bootstrap_servers([cluster.bootstrap_servers()])
        // Stores in memory, whatever PROSODY_CASSANDRA_NODES says.
        .stores(MemoryStores::new())
        .group_id(GROUP)
        .subscribed_topics([TOPIC])
        .telemetry_topic(EVENTS)
        .build()
        .await
        .unwrap();
    let recorder = Recorder::default();
    client.subscribe(recorder.clone()).await.unwrap();
    tokio::time::timeout(DEADLINE, recorder.wait_for(3))
        .await
        .expect("every record handled");

    // Offsets 0..3; offset 2 holds n = 3, which fails once.
    let mut reader = broker
        .consumer(&ConsumerConfig {
            group_id: "telemetry-reader".to_owned(),
            topics: vec![EVENTS.into()],
        })
        .await
        .unwrap();
    let mut seen: BTreeMap<(i64, u64, String), Value> = BTreeMap::new();
    let expected = [
        (0, 1, "dispatched"),
        (0, 1, "succeeded"),
        (1, 1, "dispatched"),
        (1, 1, "succeeded"),
        (2, 1, "dispatched"),
        (2, 1, "failed"),
        (2, 2, "dispatched"),
        (2, 2, "succeeded"),
    ];
    let all_seen = async {
        while seen.len() < expected.len() {
            if let ConsumerEvent::Record(record) = reader.poll().await.unwrap() {
                assert_eq!(record.key.as_deref(), Some(&b"customer-1"[..]));
                let event: Value = serde_json::from_slice(&record.payload.unwrap()).unwrap();
                assert_eq!(event["kind"], "message");
                assert_eq!(event["topic"], TOPIC);
                let at = (
                    event["offset"].as_i64().unwrap(),
                    event["attempt"].as_u64().unwrap(),
                    event["lifecycle"].as_str().unwrap().to_owned(),
                );
                let again = seen.insert(at.clone(), event);
                assert!(again.is_none(), "{at:?} arrived twice");
            }
        }
    };
    tokio::time::timeout(DEADLINE, all_seen)
        .await
        .expect("every lifecycle event on the topic");
    let keys: Vec<(i64, u64, &str)> = seen
        .keys()
        .map(|(offset, attempt, lifecycle)| (*offset, *attempt, lifecycle.as_str()))
        .collect();
    let mut wanted = expected.to_vec();
    wanted.sort_unstable();
    assert_eq!(keys, wanted);
    assert_eq!(seen[&(2, 1, "failed".to_owned())]["category"], "transient");
    assert_eq!(seen[&(2, 2, "dispatched".to_owned())]["demand"], "failure");
    reader.close().await;
    client.shutdown().await;
}
