//! A member of a consumer group on rdkafka.
//!
//! A dedicated thread polls the rdkafka consumer (rebalance callbacks run
//! there and may wait for the owner to drain) and hands records and
//! assignment changes over a bounded channel; the async side serves the
//! broker contract from that channel and calls rdkafka for offsets,
//! commits and pauses.

mod hold;

use crate::error::{backend, retriable_failure};
use crate::member::{Member, Polled};
use bytes::Bytes;
use hold::Holds;
use prosody_contracts::Timestamp;
use prosody_contracts::broker::{BrokerError, Consumer, ConsumerEvent, Record, TopicPartition};
use prosody_contracts::event::{Headers, Topic};
use prosody_contracts::hash::FastSet;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Headers as _, Message as _};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as sync;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

/// How long one rdkafka poll of the thread waits for a message.
const POLL: Duration = Duration::from_millis(100);

/// Batches and events in flight between the thread and the owner.
pub(crate) const CHANNEL: usize = 8;

/// The most records the thread hands over at once; it hands over fewer
/// when rdkafka has no more ready. With [`CHANNEL`], at most 1,024 records
/// wait between the thread and the owner, besides the batch in hand.
const BATCH: usize = 128;

/// How long a commit may take. A member that lost its assignment (evicted
/// for missing heartbeats) can have its commit wait on the rebalance that
/// the poll thread holds for the owner's drain: the deadline breaks that
/// wait, and the commit fails instead.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long reading committed offsets may take.
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(10);

type Rd = BaseConsumer<Member>;

/// A group member on Kafka.
///
/// Invariant: records of a partition reach the owner in offset order and
/// only while the partition is assigned and not paused. Records fetched
/// for a partition that is paused are held, and delivered first once it
/// resumes, so pausing loses and repeats nothing. Holding is bounded: past
/// the partition's share of 32 MiB (at least 1 MiB; key, payload, headers
/// and about 200 bytes a record) rdkafka stops fetching it (`halted`) until it
/// resumes, and what rdkafka had queued for it is fetched again then.
pub struct KafkaConsumer {
    /// `None` once shut: the close thread took it, to be the last owner.
    consumer: Option<Arc<Rd>>,
    events: mpsc::Receiver<Polled>,
    /// The answer the poll thread waits for after a revocation.
    pending_ack: Option<sync::Sender<()>>,
    /// Revoked partitions, still this member's until the next poll.
    revoking: Vec<TopicPartition>,
    assigned: FastSet<TopicPartition>,
    paused: FastSet<TopicPartition>,
    /// Paused partitions rdkafka stopped fetching too.
    halted: FastSet<TopicPartition>,
    holds: Holds,
    /// The rest of the batch last received from the thread.
    batch: VecDeque<Record>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl KafkaConsumer {
    pub(crate) fn start(
        consumer: Rd,
        events: mpsc::Receiver<Polled>,
        sender: mpsc::Sender<Polled>,
    ) -> Result<Self, BrokerError> {
        let consumer = Arc::new(consumer);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (consumer, stop) = (Arc::clone(&consumer), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("prosody-kafka-poll".to_owned())
                .spawn(move || poll_thread(&consumer, &sender, &stop))
                .map_err(retriable_failure)?
        };
        Ok(Self {
            consumer: Some(consumer),
            events,
            pending_ack: None,
            revoking: Vec::new(),
            assigned: FastSet::default(),
            paused: FastSet::default(),
            halted: FastSet::default(),
            holds: Holds::default(),
            batch: VecDeque::new(),
            stop,
            thread: Some(thread),
        })
    }

    /// The rdkafka consumer, until the consumer is shut.
    fn rd(&self) -> Result<&Arc<Rd>, BrokerError> {
        self.consumer.as_ref().ok_or(BrokerError::Closed)
    }

    fn check_assigned(&self, partition: &TopicPartition) -> Result<(), BrokerError> {
        if self.assigned.contains(partition) {
            Ok(())
        } else {
            Err(BrokerError::NotAssigned(partition.clone()))
        }
    }

    /// Holds a record of a paused partition; past its share of the hold
    /// budget, stops rdkafka fetching it.
    fn hold(&mut self, partition: &TopicPartition, record: Record) -> Result<(), BrokerError> {
        let full = self.holds.hold(partition, record, self.assigned.len());
        if full && !self.halted.contains(partition) {
            let list = list(partition, Offset::Invalid)?;
            self.rd()?.pause(&list).map_err(backend)?;
            self.halted.insert(partition.clone());
        }
        Ok(())
    }

    /// Stops the poll thread and hands the rdkafka consumer to a thread of
    /// its own to close: closing leaves the group and may block. The
    /// receiver hears when the close is done; the thread runs to its end
    /// whether or not anyone still listens.
    fn shut(&mut self) -> Option<oneshot::Receiver<()>> {
        let consumer = self.consumer.take()?;
        consumer.context().closing.store(true, Ordering::Release);
        self.stop.store(true, Ordering::Release);
        self.pending_ack = None;
        self.events.close();
        // A revocation still in the channel holds the thread's answer:
        // dropping it lets the thread go.
        while self.events.try_recv().is_ok() {}
        let poller = self.thread.take();
        let (closed, done) = oneshot::channel();
        // The poll thread's reference ends with it, so this thread drops
        // the last one: rdkafka's close (leaving the group) runs here.
        std::thread::Builder::new()
            .name("prosody-kafka-close".to_owned())
            .spawn(move || {
                if let Some(poller) = poller {
                    let _ = poller.join();
                }
                consumer.unsubscribe();
                drop(consumer);
                let _ = closed.send(());
            })
            .ok()?;
        Some(done)
    }
}

/// One list holding one partition at `offset`.
pub(crate) fn list(
    partition: &TopicPartition,
    offset: Offset,
) -> Result<TopicPartitionList, BrokerError> {
    let mut list = TopicPartitionList::with_capacity(1);
    list.add_partition_offset(&partition.topic, partition.partition, offset)
        .map_err(backend)?;
    Ok(list)
}

/// The broker contract's record of an rdkafka message; `topics` keeps one
/// shared name per topic.
pub(crate) fn record(message: &BorrowedMessage<'_>, topics: &mut HashMap<String, Topic>) -> Record {
    record_of(message, shared_topic(message.topic(), topics))
}

/// The one shared name of `topic`.
fn shared_topic(topic: &str, topics: &mut HashMap<String, Topic>) -> Topic {
    if let Some(shared) = topics.get(topic) {
        return Arc::clone(shared);
    }
    let shared: Topic = Arc::from(topic);
    topics.insert(topic.to_owned(), Arc::clone(&shared));
    shared
}

fn record_of(message: &BorrowedMessage<'_>, topic: Topic) -> Record {
    let headers = message
        .headers()
        .map(|headers| {
            headers
                .iter()
                .map(|h| {
                    (
                        h.key.to_owned(),
                        Bytes::copy_from_slice(h.value.unwrap_or_default()),
                    )
                })
                .collect::<Headers>()
        })
        .unwrap_or_default();
    let (key, payload) = key_and_payload(message.key(), message.payload());
    Record {
        topic,
        partition: message.partition(),
        offset: message.offset(),
        timestamp: Timestamp::from_millis(message.timestamp().to_millis().unwrap_or_default()),
        key,
        payload,
        headers,
    }
}

/// Copies of a message's key and payload, in one shared buffer: one copy
/// and one count for both, and clones that cost a count.
fn key_and_payload(key: Option<&[u8]>, payload: Option<&[u8]>) -> (Option<Bytes>, Option<Bytes>) {
    let split = key.map_or(0, <[u8]>::len);
    let mut buffer = Vec::with_capacity(split + payload.map_or(0, <[u8]>::len));
    buffer.extend_from_slice(key.unwrap_or_default());
    buffer.extend_from_slice(payload.unwrap_or_default());
    let buffer = Bytes::from(buffer);
    (
        key.map(|_| buffer.slice(..split)),
        payload.map(|_| buffer.slice(split..)),
    )
}

/// Polls rdkafka and hands records over in batches: a batch goes when it
/// is full or when rdkafka has nothing more ready, and before any
/// assignment change (the rebalance callbacks flush it).
fn poll_thread(consumer: &Rd, events: &mpsc::Sender<Polled>, stop: &AtomicBool) {
    let member = consumer.context();
    let mut topics = HashMap::new();
    // The topic of the last record: most records share it, and comparing
    // names is cheaper than hashing one.
    let mut last: Option<Topic> = None;
    let mut batched = 0;
    while !stop.load(Ordering::Acquire) {
        let wait = if batched == 0 { POLL } else { Duration::ZERO };
        let message = match consumer.poll(wait) {
            None => {
                batched = 0;
                if member.flush() {
                    continue;
                }
                break;
            }
            Some(Err(KafkaError::PartitionEOF(_))) => continue,
            Some(Ok(message)) => message,
            Some(Err(error @ KafkaError::MessageConsumptionFatal(_))) => {
                batched = 0;
                if !member.flush() || events.blocking_send(Polled::Failed(error)).is_err() {
                    break;
                }
                continue;
            }
            Some(Err(error)) => {
                warn!(%error, "kafka consumer error; it retries by itself");
                continue;
            }
        };
        let topic = match &last {
            Some(topic) if **topic == *message.topic() => Arc::clone(topic),
            _ => Arc::clone(last.insert(shared_topic(message.topic(), &mut topics))),
        };
        batched = member.hold(record_of(&message, topic));
        if batched >= BATCH {
            batched = 0;
            if !member.flush() {
                break;
            }
        }
    }
}

impl Consumer for KafkaConsumer {
    async fn poll(&mut self) -> Result<ConsumerEvent, BrokerError> {
        // The owner polls again: it has drained what was revoked, which
        // now goes, with any pause of it (a partition assigned here again
        // starts unpaused; rdkafka keeps its own pause across assignments).
        for partition in std::mem::take(&mut self.revoking) {
            self.assigned.remove(&partition);
            self.paused.remove(&partition);
            self.holds.forget(&partition);
            if self.halted.remove(&partition) {
                let list = list(&partition, Offset::Invalid)?;
                self.rd()?.resume(&list).map_err(backend)?;
            }
        }
        self.pending_ack = None;
        loop {
            if let Some(record) = self.holds.take(&self.paused) {
                return Ok(ConsumerEvent::Record(record));
            }
            if let Some(record) = self.batch.pop_front() {
                let partition = record.topic_partition();
                if !self.assigned.contains(&partition) {
                    continue;
                }
                if self.paused.contains(&partition) {
                    self.hold(&partition, record)?;
                    continue;
                }
                return Ok(ConsumerEvent::Record(record));
            }
            let Some(polled) = self.events.recv().await else {
                return Err(BrokerError::Closed);
            };
            match polled {
                Polled::Records(records) => self.batch = VecDeque::from(records),
                Polled::Assigned(partitions) => {
                    self.assigned.extend(partitions.iter().cloned());
                    return Ok(ConsumerEvent::Assigned(partitions));
                }
                Polled::Revoked(partitions, ack) => {
                    self.revoking.extend(partitions.iter().cloned());
                    self.pending_ack = Some(ack);
                    return Ok(ConsumerEvent::Revoked(partitions));
                }
                Polled::Failed(error) => return Err(backend(error)),
            }
        }
    }

    fn store_offset(&mut self, partition: &TopicPartition, offset: i64) -> Result<(), BrokerError> {
        self.check_assigned(partition)?;
        let list = list(partition, Offset::Offset(offset))?;
        self.rd()?
            .store_offsets(&list)
            .map_err(|error| match error {
                KafkaError::StoreOffset(RDKafkaErrorCode::State) => {
                    BrokerError::NotAssigned(partition.clone())
                }
                other => backend(other),
            })
    }

    async fn commit(&mut self) -> Result<(), BrokerError> {
        let consumer = Arc::clone(self.rd()?);
        if consumer.assignment_lost() {
            return Err(BrokerError::Backend {
                retriable: false,
                source: "the group evicted this member; its partitions were lost".into(),
            });
        }
        let commit =
            tokio::task::spawn_blocking(move || consumer.commit_consumer_state(CommitMode::Sync));
        let committed = tokio::time::timeout(COMMIT_TIMEOUT, commit)
            .await
            .map_err(|_| retriable_failure(format!("the commit took over {COMMIT_TIMEOUT:?}")))?
            .map_err(retriable_failure)?;
        match committed {
            // Nothing stored since the last commit.
            Ok(()) | Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset)) => Ok(()),
            Err(error) => Err(backend(error)),
        }
    }

    fn pause(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        self.check_assigned(partition)?;
        self.paused.insert(partition.clone());
        Ok(())
    }

    fn resume(&mut self, partition: &TopicPartition) -> Result<(), BrokerError> {
        self.check_assigned(partition)?;
        if self.halted.remove(partition) {
            let list = list(partition, Offset::Invalid)?;
            self.rd()?.resume(&list).map_err(backend)?;
        }
        if self.paused.remove(partition) {
            self.holds.resume(partition);
        }
        Ok(())
    }

    fn high_watermark(&self, partition: &TopicPartition) -> Option<i64> {
        self.consumer.as_ref()?.context().high_watermark(partition)
    }

    async fn committed(&mut self, partition: &TopicPartition) -> Result<Option<i64>, BrokerError> {
        let offsets = self
            .committed_offsets(std::slice::from_ref(partition), COMMITTED_TIMEOUT)
            .await?;
        Ok(offsets.into_iter().next().flatten())
    }

    /// One offset fetch for all of them, on a blocking thread, bounded by
    /// `timeout` (and by 10 s at most).
    async fn committed_offsets(
        &mut self,
        partitions: &[TopicPartition],
        timeout: Duration,
    ) -> Result<Vec<Option<i64>>, BrokerError> {
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        let consumer = Arc::clone(self.rd()?);
        let mut list = TopicPartitionList::with_capacity(partitions.len());
        for partition in partitions {
            list.add_partition_offset(&partition.topic, partition.partition, Offset::Invalid)
                .map_err(backend)?;
        }
        let timeout = timeout.min(COMMITTED_TIMEOUT);
        let read = tokio::task::spawn_blocking(move || consumer.committed_offsets(list, timeout))
            .await
            .map_err(retriable_failure)?
            .map_err(backend)?;
        Ok(partitions
            .iter()
            .map(|partition| {
                let element = read.find_partition(&partition.topic, partition.partition)?;
                match (element.error(), element.offset()) {
                    (Ok(()), Offset::Offset(offset)) => Some(offset),
                    _ => None,
                }
            })
            .collect())
    }

    /// Leaves the group on a thread of its own. Dropping this future
    /// stops only the wait: the close still runs to its end.
    async fn close(mut self) {
        if let Some(closed) = self.shut() {
            let _ = closed.await;
        }
    }
}

impl Drop for KafkaConsumer {
    fn drop(&mut self) {
        // Closes in the background: a drop must not block. (After `close`
        // the consumer is already shut, and this does nothing.)
        let _ = self.shut();
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod split {
    use super::key_and_payload;

    #[test]
    fn key_and_payload_come_back_as_they_were() {
        let parts: [Option<&[u8]>; 3] = [None, Some(b""), Some(b"bytes")];
        for key in parts {
            for payload in parts {
                let (k, p) = key_and_payload(key, payload);
                assert_eq!((k.as_deref(), p.as_deref()), (key, payload));
            }
        }
    }
}
