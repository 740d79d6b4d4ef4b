//! The consumer's pause bookkeeping across a rebalance, and its fetch
//! settings, on librdkafka's mock cluster.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use super::KafkaConsumer;
use crate::KafkaBroker;
use crate::mock::MockKafka;
use prosody_contracts::broker::{
    Broker, Consumer, ConsumerConfig, ConsumerEvent, OutgoingRecord, Producer, TopicPartition,
};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout};

const DEADLINE: Duration = Duration::from_secs(60);

fn config() -> ConsumerConfig {
    ConsumerConfig {
        group_id: "g".to_owned(),
        topics: vec!["t".into()],
    }
}

/// The next event, failing the test past the deadline.
async fn next(consumer: &mut KafkaConsumer) -> ConsumerEvent {
    timeout(DEADLINE, consumer.poll())
        .await
        .expect("an event before the deadline")
        .expect("a poll that succeeds")
}

/// A partition that was paused past its share of the hold budget (so
/// rdkafka stopped fetching it), or paused while being revoked, is fetched
/// again when the group gives it back: a partition assigned anew starts
/// unpaused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_paused_before_it_was_revoked_flows_when_assigned_again() {
    let cluster = MockKafka::start(1).unwrap();
    cluster.create_topic("t", 2).unwrap();
    let broker = KafkaBroker::new(cluster.config().unwrap());
    let producer = broker.producer().unwrap();
    let mut sends = JoinSet::new();
    for partition in 0..2 {
        // About 420 KiB a partition, past its share of the budget below.
        for n in 0..100 {
            let mut record = OutgoingRecord::new("t", "k", format!("{n:04096}"));
            record.partition = Some(partition);
            let producer = producer.clone();
            sends.spawn(async move { producer.send(record, Duration::from_secs(30)).await });
        }
    }
    while let Some(sent) = sends.join_next().await {
        sent.unwrap().unwrap();
    }

    let mut first = broker.consumer(&config()).await.unwrap();
    first.holds.budget = 256 << 10;
    let mut assigned = Vec::new();
    while assigned.len() < 2 {
        match next(&mut first).await {
            ConsumerEvent::Assigned(partitions) => {
                for partition in &partitions {
                    first.pause(partition).unwrap();
                }
                assigned.extend(partitions);
            }
            ConsumerEvent::Record(_) => {}
            ConsumerEvent::Revoked(partitions) => panic!("revoked {partitions:?} alone"),
        }
    }
    // Polls are cancel-safe: each bounded one holds what arrived, until
    // rdkafka stops fetching both partitions.
    let start = Instant::now();
    while first.halted.len() < 2 {
        assert!(
            start.elapsed() < DEADLINE,
            "never halted: {:?}",
            first.halted
        );
        if let Ok(event) = timeout(Duration::from_millis(100), first.poll()).await {
            panic!("an event while both partitions are paused: {event:?}");
        }
    }

    // A second member takes one partition, still paused and halted here;
    // the first lets it go at its next poll.
    let second = broker.consumer(&config()).await.unwrap();
    let moved = loop {
        if let ConsumerEvent::Revoked(partitions) = next(&mut first).await {
            break partitions;
        }
    };
    let [moved]: [TopicPartition; 1] = moved.try_into().expect("one partition moves");

    // The second member leaves; the partition comes back and flows.
    second.close().await;
    loop {
        match next(&mut first).await {
            ConsumerEvent::Record(record) => {
                assert_eq!(record.topic_partition(), moved, "the other stays paused");
                break;
            }
            ConsumerEvent::Assigned(partitions) => {
                assert_eq!(partitions, std::slice::from_ref(&moved));
            }
            ConsumerEvent::Revoked(partitions) => panic!("revoked {partitions:?}"),
        }
    }
    first.close().await;
}

/// The consumer's fetch is smaller than librdkafka's default, yet a client
/// configured for larger records (`message.max.bytes` above it, in any form
/// librdkafka reads) still gets a consumer, and reads a record larger than
/// that default fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_for_records_larger_than_its_default_fetch_reads_them() {
    const LARGE: usize = 9 << 20;
    let cluster = MockKafka::start(1).unwrap();
    // 12,000,000 bytes, in decimal and in hexadecimal.
    for (topic, limit) in [("decimal", "12000000"), ("hex", "0xB71B00")] {
        cluster.create_topic(topic, 1).unwrap();
        let settings = cluster.config().unwrap().with("message.max.bytes", limit);
        let broker = KafkaBroker::new(settings);
        let producer = broker.producer().unwrap();
        let record = OutgoingRecord::new(topic, "k", "x".repeat(LARGE));
        producer.send(record, DEADLINE).await.unwrap();

        // A group and a topic of its own.
        let group = ConsumerConfig {
            group_id: topic.to_owned(),
            topics: vec![topic.into()],
        };
        let mut consumer = broker.consumer(&group).await.unwrap();
        loop {
            match next(&mut consumer).await {
                ConsumerEvent::Record(record) => {
                    let payload = record.payload.expect("a payload");
                    assert_eq!(payload.len(), LARGE, "with {limit}");
                    break;
                }
                ConsumerEvent::Assigned(_) => {}
                ConsumerEvent::Revoked(partitions) => panic!("revoked {partitions:?}"),
            }
        }
        consumer.close().await;
    }
}
