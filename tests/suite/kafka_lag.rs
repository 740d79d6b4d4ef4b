//! On a real Apache Kafka, the lag a client reports at `/metrics` is what
//! the broker says: each partition's high watermark minus the group's
//! committed offset, both read from the broker with a plain rdkafka
//! client. A held record keeps its partition's lag above zero; once it is
//! released every partition's lag goes to zero with the broker's. A
//! partition with a backlog that the member holds and receives nothing
//! from shows its lag too. Without `PROSODY_BOOTSTRAP_SERVERS` the suite
//! prints one line and does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use openmetrics_parser::PrometheusValue;
use openmetrics_parser::prometheus::parse_prometheus;
use prosody::broker::{Broker as _, OutgoingRecord, Producer as _};
use prosody::{
    AdminClient, Context, EventHandler, Excise, HandlerError, KafkaBroker, KafkaConfig,
    MemoryStores, Message, ProsodyClient, Timer, TopicOptions,
};
use prosody_conformance::services;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::withhold::Withholding;
use tokio::sync::Notify;

use crate::support;

const SUITE: &str = "tests/suite/kafka_lag.rs (real Kafka)";
const PARTITIONS: i32 = 2;
const DEADLINE: Duration = Duration::from_secs(90);

/// Handles at once, except the key `hold`, which waits until released.
#[derive(Clone, Default)]
struct Holding {
    released: Arc<AtomicBool>,
    release: Arc<Notify>,
}

impl EventHandler for Holding {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, message: Message<Value>) -> Result<(), HandlerError> {
        if message.key.as_str() == "hold" {
            loop {
                let released = self.release.notified();
                if self.released.load(Ordering::Acquire) {
                    break;
                }
                released.await;
            }
        }
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// The body of `GET /metrics` on the probe server at `address`.
async fn scrape(address: SocketAddr) -> String {
    let (status, _, body) = support::http::fetch(address, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The lag `/metrics` reports for each partition of `group`, parsed with a
/// Prometheus text parser.
fn reported(page: &str, group: &str) -> BTreeMap<i32, f64> {
    let exposition = parse_prometheus(page).unwrap_or_else(|e| panic!("{e:?} in\n{page}"));
    let Some(family) = exposition.families.get("prosody_partition_lag") else {
        return BTreeMap::new();
    };
    family
        .iter_samples()
        .filter_map(|sample| {
            let labels = sample.get_labelset().unwrap();
            let of = |name: &str| {
                labels
                    .iter()
                    .find(|(n, _)| n.as_str() == name)
                    .map(|(_, v)| v.clone())
            };
            if of("messaging_consumer_group_name").as_deref() != Some(group) {
                return None;
            }
            let partition = of("messaging_destination_partition_id")?.parse().ok()?;
            let PrometheusValue::Gauge(value) = &sample.value else {
                panic!("a gauge: {:?}", sample.value);
            };
            Some((partition, value.as_f64()))
        })
        .collect()
}

/// Each partition's high watermark minus the group's committed offset (0
/// committed when the group has none), as the broker tells them.
async fn broker_lag(servers: &str, topic: &str, group: &str) -> BTreeMap<i32, f64> {
    let (servers, topic, group) = (servers.to_owned(), topic.to_owned(), group.to_owned());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("group.id", &group)
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        for partition in 0..PARTITIONS {
            list.add_partition(&topic, partition);
        }
        let committed = consumer
            .committed_offsets(list, Duration::from_secs(10))
            .unwrap();
        (0..PARTITIONS)
            .map(|partition| {
                let (_, high) = consumer
                    .fetch_watermarks(&topic, partition, Duration::from_secs(10))
                    .unwrap();
                let offset = committed
                    .find_partition(&topic, partition)
                    .map_or(Offset::Invalid, |element| element.offset());
                let committed = match offset {
                    Offset::Offset(offset) => offset,
                    _ => 0,
                };
                #[allow(clippy::cast_precision_loss)]
                (partition, (high - committed) as f64)
            })
            .collect()
    })
    .await
    .unwrap()
}

/// Creates `topic` with `partitions` partitions on the broker.
async fn create_topic(config: &KafkaConfig, topic: &str, partitions: i32) {
    let options = TopicOptions {
        partitions: Some(partitions),
        replication_factor: Some(1),
        ..TopicOptions::default()
    };
    AdminClient::with_config(config)
        .unwrap()
        .create_topic(topic, &options)
        .await
        .unwrap();
}

/// Waits until the client's lag equals the broker's on every partition
/// and `accept` holds for it; returns it.
async fn until_agreed(
    client: &ProsodyClient,
    (servers, topic, group): (&str, &str, &str),
    accept: impl Fn(&BTreeMap<i32, f64>) -> bool,
) -> BTreeMap<i32, f64> {
    let address = client.probe_address().expect("the probe runs");
    let mut last = (BTreeMap::new(), BTreeMap::new());
    let agreed = tokio::time::timeout(DEADLINE, async {
        loop {
            let broker = broker_lag(servers, topic, group).await;
            let ours = reported(&scrape(address).await, group);
            let again = broker_lag(servers, topic, group).await;
            // Compared only while the broker held still around the scrape.
            if broker == again && ours == broker && accept(&ours) {
                return ours;
            }
            last = (ours, broker);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    agreed.unwrap_or_else(|_| panic!("reported, broker: {last:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lag_at_metrics_is_the_brokers_watermark_minus_the_committed_offset() {
    let Some(servers) = services::server(services::KAFKA, SUITE) else {
        return;
    };
    let config = KafkaConfig::new(servers.split(',')).unwrap();
    let topic = services::unique("lagging");
    let group = services::unique("lagging_group");
    create_topic(&config, &topic, PARTITIONS).await;
    let broker = KafkaBroker::new(config);
    let producer = broker.producer().unwrap();
    let send = |key: String| {
        let record = OutgoingRecord::new(topic.as_str(), key, b"{}".to_vec());
        producer.send(record, Duration::from_secs(30))
    };
    for n in 0..20 {
        send(format!("key-{n}")).await.unwrap();
    }
    let held = send("hold".to_owned()).await.unwrap();
    for n in 20..60 {
        send(format!("key-{n}")).await.unwrap();
    }
    let handler = Holding::default();
    let client = ProsodyClient::builder()
        .bootstrap_servers([servers.as_str()])
        .group_id(group.as_str())
        .source_system("producer")
        .subscribed_topics([topic.as_str()])
        .probe_port(0)
        .statistics_interval(Duration::from_millis(200))
        .stores(MemoryStores::new())
        .build()
        .await
        .unwrap();
    client.subscribe(handler.clone()).await.unwrap();
    let names = (servers.as_str(), topic.as_str(), group.as_str());

    // The held record keeps its partition from committing past it.
    let lag = until_agreed(&client, names, |lag| {
        lag.len() == usize::try_from(PARTITIONS).unwrap()
            && lag.get(&held.partition).is_some_and(|&behind| behind > 0.0)
    })
    .await;
    assert!(lag[&held.partition] > 0.0, "{lag:?}");

    handler.released.store(true, Ordering::Release);
    handler.release.notify_waiters();
    let lag = until_agreed(&client, names, |lag| {
        lag.values().all(|&behind| behind == 0.0)
    })
    .await;
    assert_eq!(lag.len(), usize::try_from(PARTITIONS).unwrap(), "{lag:?}");
    client.shutdown().await;
}

/// A group committed offset 4 of partition 0's 10 records; a member that
/// holds the partition and receives nothing from it (its records are
/// withheld, as from a stalled fetch) reports a lag of 6: the group's
/// committed offset is read from the broker at assignment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_that_receives_nothing_shows_its_backlog() {
    let Some(servers) = services::server(services::KAFKA, SUITE) else {
        return;
    };
    let config = KafkaConfig::new(servers.split(','))
        .unwrap()
        .statistics_interval(Duration::from_millis(200));
    let topic = services::unique("stalled");
    let group = services::unique("stalled_group");
    create_topic(&config, &topic, 1).await;
    let broker = KafkaBroker::new(config);
    let producer = broker.producer().unwrap();
    for n in 0..10 {
        let mut record = OutgoingRecord::new(topic.as_str(), format!("key-{n}"), b"{}".to_vec());
        record.partition = Some(0);
        producer
            .send(record, Duration::from_secs(30))
            .await
            .unwrap();
    }
    let (committing, for_group, servers_for) = (topic.clone(), group.clone(), servers.clone());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &servers_for)
            .set("group.id", &for_group)
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&committing, 0, Offset::Offset(4))
            .unwrap();
        consumer.commit(&list, CommitMode::Sync).unwrap();
    })
    .await
    .unwrap();
    let withholding = Withholding {
        inner: broker,
        withheld: Arc::new(HashSet::from([prosody::broker::TopicPartition::new(
            topic.as_str(),
            0,
        )])),
    };
    let client = ProsodyClient::builder()
        .broker(withholding)
        .group_id(group.as_str())
        .source_system("producer")
        .subscribed_topics([topic.as_str()])
        .probe_port(0)
        .stores(MemoryStores::new())
        .build()
        .await
        .unwrap();
    client.subscribe(Holding::default()).await.unwrap();
    let address = client.probe_address().expect("the probe runs");
    let mut last = BTreeMap::new();
    let shown = tokio::time::timeout(DEADLINE, async {
        loop {
            last = reported(&scrape(address).await, &group);
            if last.get(&0) == Some(&6.0) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(shown.is_ok(), "the lag reported: {last:?}");
    client.shutdown().await;
}
