//! Fixtures of a check: unique names, a topic, a producer, expected records.

use super::Harness;
use super::driver::Member;
use super::{Checked, Failure};
use bytes::Bytes;
use prosody_contracts::broker::{
    Broker, BrokerError, ConsumerConfig, Delivery, OutgoingRecord, Producer, Record, TopicPartition,
};
use prosody_contracts::clock::{self, Timestamp};
use prosody_contracts::event::Topic;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::time::Duration;
use tokio::time::{Instant, timeout};

pub(super) fn ensure_eq<T: PartialEq + Debug>(what: &str, expected: &T, got: &T) -> Checked {
    if expected == got {
        Ok(())
    } else {
        Err(Failure(format!(
            "{what}: expected {expected:?}, got {got:?}"
        )))
    }
}

pub(super) fn broker_failure(what: &str) -> impl FnOnce(BrokerError) -> Failure + '_ {
    move |error| Failure(format!("{what} failed: {error}"))
}

/// A name no other check of this process, or of another run on the same
/// cluster, uses.
pub(super) fn unique(kind: &str) -> String {
    crate::services::unique(&format!("conformance_{kind}"))
}

/// What [`Fixture::produce`] sends: a keyed record with a sequence header and
/// an explicit timestamp, so the stored record is known exactly.
pub(super) fn outgoing(
    topic: &Topic,
    partition: Option<i32>,
    key: &str,
    seq: i64,
    base: i64,
) -> OutgoingRecord {
    OutgoingRecord {
        topic: topic.clone(),
        partition,
        key: Some(Bytes::from(key.to_owned())),
        payload: Some(Bytes::from(format!("payload-{seq}"))),
        headers: [("seq", seq.to_string())].into_iter().collect(),
        timestamp: Some(Timestamp::from_millis(base + seq)),
    }
}

/// The record a broker must store for `record` delivered at `delivery`.
pub(super) fn stored(record: &OutgoingRecord, delivery: Delivery) -> Record {
    Record {
        topic: record.topic.clone(),
        partition: delivery.partition,
        offset: delivery.offset,
        timestamp: record.timestamp.unwrap_or_default(),
        key: record.key.clone(),
        payload: record.payload.clone(),
        headers: record.headers.clone(),
    }
}

/// A topic of its own, a group name and a producer, for one check.
pub(super) struct Fixture<B: Broker> {
    pub(super) broker: B,
    pub(super) producer: B::Producer,
    pub(super) topic: Topic,
    pub(super) group: String,
    pub(super) partitions: i32,
    pub(super) deadline: Duration,
    pub(super) base: i64,
    pub(super) seq: i64,
}

impl<B: Broker> Fixture<B> {
    pub(super) async fn new<H: Harness<Broker = B>>(
        harness: &H,
        kind: &str,
        partitions: i32,
    ) -> Checked<Self> {
        let topic = unique(kind);
        harness
            .create_topic(&topic, partitions)
            .await
            .map_err(broker_failure("creating a topic"))?;
        let broker = harness.broker();
        let producer = broker
            .producer()
            .map_err(broker_failure("creating a producer"))?;
        Ok(Self {
            broker,
            producer,
            topic: topic.into(),
            group: unique(&format!("{kind}-group")),
            partitions,
            deadline: harness.deadline(),
            base: clock::now().as_millis(),
            seq: 0,
        })
    }

    pub(super) fn tp(&self, partition: i32) -> TopicPartition {
        TopicPartition::new(self.topic.clone(), partition)
    }

    pub(super) fn all_partitions(&self) -> BTreeSet<TopicPartition> {
        (0..self.partitions).map(|p| self.tp(p)).collect()
    }

    pub(super) fn config(&self, group: &str) -> ConsumerConfig {
        ConsumerConfig {
            group_id: group.to_owned(),
            topics: vec![self.topic.clone()],
        }
    }

    pub(super) async fn send(&self, record: OutgoingRecord) -> Checked<Delivery> {
        self.producer
            .send(record, self.deadline)
            .await
            .map_err(broker_failure("sending a record"))
    }

    /// Sends `count` records to each partition; returns what was stored.
    pub(super) async fn produce(&mut self, count: i64) -> Checked<Vec<Record>> {
        let mut records = Vec::new();
        for partition in 0..self.partitions {
            for _ in 0..count {
                self.seq += 1;
                let record = outgoing(
                    &self.topic,
                    Some(partition),
                    &format!("key-{partition}"),
                    self.seq,
                    self.base,
                );
                let delivery = self.send(record.clone()).await?;
                ensure_eq(
                    "the partition of a record sent to a fixed partition",
                    &partition,
                    &delivery.partition,
                )?;
                records.push(stored(&record, delivery));
            }
        }
        Ok(records)
    }

    pub(super) async fn join(&self, label: &str, group: &str) -> Checked<Member<B::Consumer>> {
        let consumer = timeout(self.deadline, self.broker.consumer(&self.config(group)))
            .await
            .map_err(|_| {
                Failure(format!(
                    "{label} could not join group {group} in {:?}",
                    self.deadline
                ))
            })?
            .map_err(broker_failure("joining a group"))?;
        Ok(Member {
            label: label.to_owned(),
            consumer,
            owned: BTreeSet::new(),
            received: Vec::new(),
            since_assigned: BTreeMap::new(),
        })
    }

    pub(super) fn deadline(&self) -> Instant {
        Instant::now() + self.deadline
    }
}
