//! The whole client on a real Apache Kafka (`KRaft`, from `scripts/services`):
//! members come and go while keyed records flow over several partitions,
//! with the classic protocol and with Kafka 4's consumer protocol. Every
//! record is handled, in key order, none that settled is handled again on
//! a graceful hand-off (a shutdown or an unsubscribe; a member joining
//! revokes partitions at once, which may hand over settled records above
//! the ones the revoked member left), every partition ends committed, and
//! a member that joins afterwards receives nothing. Without `PROSODY_BOOTSTRAP_SERVERS`
//! the suite prints one line and does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::{Broker, Consumer, ConsumerConfig, OutgoingRecord, Producer, TopicPartition};
use prosody::{
    AdminClient, Context, EventHandler, Excise, GroupProtocol, HandlerError, KafkaBroker,
    KafkaConfig, MemoryStores, Message, ProsodyClient, Timer, TopicOptions,
};
use prosody_conformance::services;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SUITE: &str = "tests/suite/kafka_real.rs (real Kafka)";
const PARTITIONS: i32 = 8;
const KEYS: u64 = 300;
const RECORDS: u64 = 12_000;
const DEADLINE: Duration = Duration::from_secs(240);

/// What the members did, across all of them.
#[derive(Default)]
struct Log {
    /// The member that first handled each (partition, offset) successfully.
    settled: HashMap<(i32, i64), u32>,
    /// Handled successfully again: (first member, again by, partition,
    /// offset, phase of the run).
    redelivered: Vec<(u32, u32, i32, i64, u32)>,
    /// The phase of the run: 0 while the first two members join, 1 while
    /// the first shuts down, 2 while the third joins, 3 while the second
    /// unsubscribes.
    phase: u32,
    /// Per key, the sequence numbers in the order first handled.
    order: HashMap<String, Vec<u64>>,
    /// Calls per member.
    calls: HashMap<u32, usize>,
}

#[derive(Clone)]
struct Member {
    id: u32,
    log: Arc<Mutex<Log>>,
}

impl EventHandler for Member {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, message: Message<Value>) -> Result<(), HandlerError> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let mut log = self.log.lock().unwrap();
        *log.calls.entry(self.id).or_default() += 1;
        let at = (message.partition, message.offset);
        if let Some(first) = log.settled.insert(at, self.id) {
            let phase = log.phase;
            log.redelivered.push((first, self.id, at.0, at.1, phase));
        } else {
            let n = message.payload["n"].as_u64().unwrap();
            log.order
                .entry(message.key.to_string())
                .or_default()
                .push(n);
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

struct Run {
    servers: String,
    topic: String,
    group: String,
    protocol: GroupProtocol,
    log: Arc<Mutex<Log>>,
}

impl Run {
    async fn member(&self, id: u32) -> ProsodyClient {
        let client = ProsodyClient::builder()
            .bootstrap_servers([self.servers.as_str()])
            .group_id(self.group.as_str())
            .source_system("producer")
            .subscribed_topics([self.topic.as_str()])
            .group_protocol(self.protocol)
            .disable_probe()
            // Slow enough that every member's share outlasts a rebalance.
            .max_concurrency(4)
            // Stores in memory, whatever PROSODY_CASSANDRA_NODES says.
            .stores(MemoryStores::new())
            .build()
            .await
            .unwrap();
        let handler = Member {
            id,
            log: Arc::clone(&self.log),
        };
        client.subscribe(handler).await.unwrap();
        client
    }

    fn handled(&self) -> usize {
        self.log.lock().unwrap().settled.len()
    }

    async fn until_handled(&self, count: u64) {
        let count = usize::try_from(count).unwrap();
        let wait = async {
            while self.handled() < count {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(DEADLINE, wait)
            .await
            .unwrap_or_else(|_| panic!("only {} of {count} handled", self.handled()));
    }
}

/// Waits until `member` holds a partition.
async fn assigned(member: &ProsodyClient) {
    let wait = async {
        while member.assigned_partition_count() == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(DEADLINE, wait)
        .await
        .expect("assigned a partition");
}

/// Produces the workload; returns each partition's end offset.
async fn produce(broker: &KafkaBroker, topic: &str) -> BTreeMap<i32, i64> {
    let producer = broker.producer().unwrap();
    let mut ends = BTreeMap::new();
    let all: Vec<u64> = (0..RECORDS).collect();
    for chunk in all.chunks(2000) {
        let sends = chunk.iter().map(|&n| {
            let payload = json!({"n": n, "type": "order.placed"}).to_string();
            let record = OutgoingRecord::new(topic, format!("key-{}", n % KEYS), payload);
            producer.send(record, Duration::from_secs(30))
        });
        for delivery in futures_util::future::join_all(sends).await {
            let delivery = delivery.unwrap();
            let end: &mut i64 = ends.entry(delivery.partition).or_default();
            *end = (*end).max(delivery.offset + 1);
        }
    }
    ends
}

async fn members_come_and_go(protocol: GroupProtocol) {
    let Some(servers) = services::server(services::KAFKA, SUITE) else {
        return;
    };
    let config = KafkaConfig::new(servers.split(',')).unwrap();
    let topic = services::unique("orders");
    let options = TopicOptions {
        partitions: Some(PARTITIONS),
        replication_factor: Some(1),
        ..TopicOptions::default()
    };
    AdminClient::with_config(&config)
        .unwrap()
        .create_topic(&topic, &options)
        .await
        .unwrap();
    let broker = KafkaBroker::new(config.group_protocol(protocol));
    let ends = produce(&broker, &topic).await;
    let run = Run {
        servers,
        group: services::unique("orders_group"),
        topic,
        protocol,
        log: Arc::default(),
    };
    // Two members; a third of the way through (and once both hold
    // partitions) the first shuts down and a third joins; two thirds
    // through (once the third holds partitions) the second unsubscribes.
    let a = run.member(1).await;
    let b = run.member(2).await;
    assigned(&b).await;
    run.until_handled(RECORDS / 3).await;
    run.log.lock().unwrap().phase = 1;
    a.shutdown().await;
    run.log.lock().unwrap().phase = 2;
    let c = run.member(3).await;
    assigned(&c).await;
    run.until_handled(2 * RECORDS / 3).await;
    run.log.lock().unwrap().phase = 3;
    b.unsubscribe().await.unwrap();
    run.until_handled(RECORDS).await;
    c.shutdown().await;
    b.shutdown().await;

    {
        let log = run.log.lock().unwrap();
        // Only a join's revocation may hand over settled records: while
        // the second joins (phase 0) and while the third joins (phase 2),
        // from whichever member the group's assignment takes a partition
        // (with the consumer protocol a partition can move to the joining
        // member and back before the assignment settles). A graceful
        // hand-off (phases 1 and 3) hands over none.
        let after_a_graceful_hand_off: Vec<_> = log
            .redelivered
            .iter()
            .filter(|(_, _, _, _, phase)| !matches!(phase, 0 | 2))
            .collect();
        assert_eq!(
            after_a_graceful_hand_off,
            [] as [&(u32, u32, i32, i64, u32); 0],
            "{protocol}: settled records handled again after a graceful hand-off"
        );
        assert_eq!(log.order.len(), usize::try_from(KEYS).unwrap());
        for (key, sequence) in &log.order {
            assert!(
                sequence.windows(2).all(|w| w[0] < w[1]),
                "{protocol}: {key} out of order: {sequence:?}"
            );
        }
        assert_eq!(
            log.calls.len(),
            3,
            "{protocol}: every member handled records"
        );
    }

    // A member joining now receives nothing: everything was committed.
    let late = run.member(4).await;
    assigned(&late).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    late.shutdown().await;
    assert_eq!(
        run.log.lock().unwrap().calls.get(&4),
        None,
        "{protocol}: redelivered to a late member"
    );

    let mut probe = broker
        .consumer(&ConsumerConfig {
            group_id: run.group.clone(),
            topics: vec![run.topic.as_str().into()],
        })
        .await
        .unwrap();
    for (partition, end) in ends {
        let tp = TopicPartition::new(run.topic.as_str(), partition);
        let committed = probe.committed(&tp).await.unwrap();
        assert_eq!(committed, Some(end), "{protocol}: partition {partition}");
    }
    probe.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_come_and_go_with_the_classic_protocol() {
    members_come_and_go(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_come_and_go_with_the_consumer_protocol() {
    members_come_and_go(GroupProtocol::Consumer).await;
}
