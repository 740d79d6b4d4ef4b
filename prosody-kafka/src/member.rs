//! The consumer context: turns rdkafka's rebalance callbacks into the
//! events of the broker contract, and holds a revocation until the
//! consumer's owner has drained.

use prosody_contracts::broker::{Record, TopicPartition};
use prosody_contracts::hash::FastMap;
use rdkafka::consumer::{BaseConsumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::{ClientContext, TopicPartitionList};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as sync;
use std::sync::{Mutex, PoisonError};
use tokio::sync::mpsc;

/// The part of librdkafka's statistics the lag gauge reads.
#[derive(serde::Deserialize)]
struct Statistics {
    #[serde(default)]
    topics: HashMap<String, TopicStatistics>,
}

#[derive(serde::Deserialize)]
struct TopicStatistics {
    #[serde(default)]
    partitions: HashMap<String, PartitionStatistics>,
}

#[derive(serde::Deserialize)]
struct PartitionStatistics {
    hi_offset: i64,
}

/// What the poll thread hands to the consumer.
#[derive(Debug)]
pub(crate) enum Polled {
    /// Records in the order rdkafka gave them.
    Records(Vec<Record>),
    Assigned(Vec<TopicPartition>),
    /// Partitions leaving; the rebalance waits until `ack` is answered or
    /// dropped, which the consumer does at its next poll.
    Revoked(Vec<TopicPartition>, sync::Sender<()>),
    /// A fatal consumption error.
    Failed(KafkaError),
}

/// The consumer's rdkafka context.
///
/// Invariants: while a revocation is handed over and not yet acknowledged,
/// the rebalance (and so the partitions' move to another member) waits:
/// the partitions stay this member's, their offsets storable and
/// committable. Once `closing` is set the callbacks hand nothing over and
/// never wait, so closing cannot deadlock. Records the poll thread batches
/// in `pending` are handed over before any assignment change that follows
/// them, so the owner sees events in the order rdkafka produced them.
pub(crate) struct Member {
    pub(crate) events: mpsc::Sender<Polled>,
    pub(crate) closing: AtomicBool,
    /// Records polled and not yet handed over (the poll thread's batch).
    pending: Mutex<Vec<Record>>,
    /// Each partition's high watermark, from the last statistics.
    highs: Mutex<FastMap<TopicPartition, i64>>,
}

impl Member {
    pub(crate) fn new(events: mpsc::Sender<Polled>) -> Self {
        Self {
            events,
            closing: AtomicBool::new(false),
            pending: Mutex::new(Vec::new()),
            highs: Mutex::default(),
        }
    }

    /// The partition's high watermark in the last statistics, if any.
    pub(crate) fn high_watermark(&self, partition: &TopicPartition) -> Option<i64> {
        let highs = self.highs.lock().unwrap_or_else(PoisonError::into_inner);
        highs.get(partition).copied()
    }

    fn closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    fn batch(&self) -> std::sync::MutexGuard<'_, Vec<Record>> {
        // Nothing panics while holding it: a poisoned batch is consistent.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a polled record to the batch; returns the batch's length.
    pub(crate) fn hold(&self, record: Record) -> usize {
        let mut batch = self.batch();
        batch.push(record);
        batch.len()
    }

    /// Hands the batch over (waiting for room); `false` once the owner is
    /// gone.
    pub(crate) fn flush(&self) -> bool {
        let records = std::mem::take(&mut *self.batch());
        records.is_empty() || self.events.blocking_send(Polled::Records(records)).is_ok()
    }
}

/// The partitions of a list, in order.
pub(crate) fn partitions(list: &TopicPartitionList) -> Vec<TopicPartition> {
    list.elements()
        .iter()
        .map(|element| TopicPartition::new(element.topic(), element.partition()))
        .collect()
}

impl ClientContext for Member {
    /// librdkafka's statistics (every `statistics.interval.ms`), as raw
    /// JSON at trace level under `prosody_kafka::statistics`; the high
    /// watermarks in them are kept for [`Member::high_watermark`].
    fn stats_raw(&self, statistics: &[u8]) {
        tracing::trace!(
            target: "prosody_kafka::statistics",
            statistics = %String::from_utf8_lossy(statistics),
        );
        match serde_json::from_slice::<Statistics>(statistics) {
            Ok(parsed) => {
                // Each report replaces the last: a partition no longer
                // assigned, or whose watermark librdkafka no longer knows,
                // keeps no stale value.
                let mut fresh = FastMap::default();
                for (topic, partitions) in parsed.topics {
                    for (partition, seen) in partitions.partitions {
                        // librdkafka lists an internal partition -1, and
                        // -1 for a watermark it has not learned.
                        if let (Ok(partition @ 0..), 0..) =
                            (partition.parse::<i32>(), seen.hi_offset)
                        {
                            fresh.insert(
                                TopicPartition::new(topic.as_str(), partition),
                                seen.hi_offset,
                            );
                        }
                    }
                }
                *self.highs.lock().unwrap_or_else(PoisonError::into_inner) = fresh;
            }
            Err(error) => tracing::debug!(%error, "librdkafka statistics did not parse"),
        }
    }
}

impl ConsumerContext for Member {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(list) = rebalance else {
            return;
        };
        let revoked = partitions(list);
        if revoked.is_empty() || self.closing() {
            return;
        }
        // Records polled before the revocation go first.
        self.flush();
        let (ack, acked) = sync::channel();
        // Runs on the poll thread, never inside the async runtime.
        if self
            .events
            .blocking_send(Polled::Revoked(revoked, ack))
            .is_ok()
        {
            // Answered or dropped at the owner's next poll, or when the
            // consumer goes away.
            let _ = acked.recv();
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Assign(list) = rebalance else {
            return;
        };
        let assigned = partitions(list);
        if assigned.is_empty() || self.closing() {
            return;
        }
        self.flush();
        let _ = self.events.blocking_send(Polled::Assigned(assigned));
    }
}
