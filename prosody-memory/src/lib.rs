//! A deterministic in-memory broker for prosody, for tests and mock mode.
//!
//! [`MemoryBroker`] implements the broker contract of
//! [`prosody_contracts::broker`]: topics with append-only partition logs, a
//! producer with Kafka's partitioner, and consumer groups with cooperative
//! rebalancing, committed offsets and pause/resume. It runs on tokio's clock,
//! so under a paused clock a whole system built on it is deterministic.
//!
//! It passes the shared conformance suite
//! (`prosody_conformance::broker`, see `tests/suite/conformance.rs`).
//!
//! ```
//! use prosody_contracts::broker::{
//!     Broker, Consumer, ConsumerConfig, ConsumerEvent, OutgoingRecord, Producer,
//! };
//! use prosody_memory::MemoryBroker;
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
//! # runtime.block_on(async {
//! let broker = MemoryBroker::new();
//! broker.create_topic("orders", 2)?;
//! let producer = broker.producer()?;
//! let sent = producer
//!     .send(OutgoingRecord::new("orders", "user-1", "{}"), Duration::from_secs(1))
//!     .await?;
//!
//! let config = ConsumerConfig { group_id: "billing".into(), topics: vec!["orders".into()] };
//! let mut consumer = broker.consumer(&config).await?;
//! // A lone member gets every partition, then reads from the earliest offset.
//! assert!(matches!(consumer.poll().await?, ConsumerEvent::Assigned(tps) if tps.len() == 2));
//! let ConsumerEvent::Record(record) = consumer.poll().await? else { unreachable!() };
//! assert_eq!((record.partition, record.offset), (sent.partition, sent.offset));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })
//! # }
//! ```

mod assignment;
mod cells;
mod consumer;
mod dedup;
mod defer;
mod directory;
mod group;
mod log;
mod member;
mod producer;
mod state;
mod stores;
mod timer;

pub use cells::MemoryStateStore;
pub use consumer::MemoryConsumer;
pub use dedup::MemoryDedupStore;
pub use defer::MemoryDeferStore;
pub use directory::MemoryPeerDirectory;
pub use log::AUTO_CREATE_PARTITIONS;
pub use producer::MemoryProducer;
pub use stores::MemoryStores;
pub use timer::MemoryTimerStore;

use prosody_contracts::broker::{Broker, BrokerError, ConsumerConfig, Record, TopicPartition};
use state::State;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;

/// The state shared by a broker's handles, consumers and producers.
///
/// Invariant: every change of `state` that can give a waiting consumer an
/// event (a record, a topic, a join, a leave, a released revocation, a
/// resume) is followed by [`Shared::changed`]; pollers register with
/// `notify` before they inspect `state`, so no wake-up is missed.
#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    notify: Notify,
}

impl Shared {
    /// Locks the state. No code panics while holding the lock, so a poisoned
    /// lock (a panicking test thread) still guards consistent state and is
    /// recovered.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes every waiting poll to look at the state again.
    fn changed(&self) {
        self.notify.notify_waiters();
    }
}

/// An in-memory broker; clones share the same topics and groups.
///
/// Invariants: a partition's log only grows and offsets start at 0; a
/// partition of a group is owned by at most one member at a time (see the
/// crate's `Group`), and moves to a new member only after the previous owner
/// acknowledged its revocation by polling again, or left.
#[derive(Clone, Debug, Default)]
pub struct MemoryBroker {
    shared: Arc<Shared>,
}

impl MemoryBroker {
    /// An empty broker.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates a topic with `partitions` partitions. Creating an existing
    /// topic again with the same count does nothing; another count, or a
    /// count below 1, is [`BrokerError::Invalid`].
    pub fn create_topic(&self, name: &str, partitions: i32) -> Result<(), BrokerError> {
        let created = self.shared.lock().create_topic(name, partitions)?;
        if created {
            self.shared.changed();
        }
        Ok(())
    }

    /// A group's committed offset of a partition.
    #[must_use]
    pub fn committed_offset(&self, group: &str, partition: &TopicPartition) -> Option<i64> {
        self.shared.lock().committed(group, partition)
    }

    /// The offset the next record of a partition gets; `None` if the
    /// partition does not exist.
    #[must_use]
    pub fn end_offset(&self, partition: &TopicPartition) -> Option<i64> {
        self.shared.lock().logs().end_offset(partition)
    }

    /// Deletes the records of a partition below offset `before`, as
    /// retention or Kafka's `DeleteRecords` would: a read of their offsets
    /// finds nothing, and a consumer still among them goes on from the
    /// first record kept.
    ///
    /// # Errors
    ///
    /// [`BrokerError::UnknownTopic`] or [`BrokerError::UnknownPartition`].
    pub fn delete_records(
        &self,
        partition: &TopicPartition,
        before: i64,
    ) -> Result<(), BrokerError> {
        self.shared.lock().delete_records(partition, before)
    }

    /// The partition count of a topic; `None` if it does not exist.
    #[must_use]
    pub fn partition_count(&self, topic: &str) -> Option<i32> {
        self.shared.lock().logs().partition_count(topic)
    }

    /// Every record of a topic, partition by partition, each in offset
    /// order: what a test reads back (a failure topic, say). Empty if the
    /// topic does not exist.
    #[must_use]
    pub fn records(&self, topic: &str) -> Vec<Record> {
        let state = self.shared.lock();
        let logs = state.logs();
        let partitions = logs.partition_count(topic).unwrap_or(0);
        (0..partitions)
            .flat_map(|partition| {
                let tp = TopicPartition::new(topic, partition);
                let end = logs.end_offset(&tp).unwrap_or(0);
                (0..end).filter_map(move |offset| logs.get(&tp, offset).cloned())
            })
            .collect()
    }
}

impl Broker for MemoryBroker {
    type Consumer = MemoryConsumer;
    type Producer = MemoryProducer;

    /// Its records die with the process.
    fn durable(&self) -> bool {
        false
    }

    /// Joins the group at once; topics that do not exist yet are assigned
    /// when they are created.
    async fn consumer(&self, config: &ConsumerConfig) -> Result<MemoryConsumer, BrokerError> {
        if config.group_id.is_empty() {
            return Err(BrokerError::Invalid(
                "the group id must not be empty".into(),
            ));
        }
        if config.topics.is_empty() {
            return Err(BrokerError::Invalid(format!(
                "group {} subscribes to no topic",
                config.group_id
            )));
        }
        let member = self
            .shared
            .lock()
            .join(&config.group_id, config.topics.clone());
        self.shared.changed();
        Ok(MemoryConsumer::new(
            Arc::clone(&self.shared),
            config.group_id.clone(),
            member,
        ))
    }

    fn producer(&self) -> Result<MemoryProducer, BrokerError> {
        Ok(MemoryProducer::new(Arc::clone(&self.shared)))
    }

    /// An unknown topic or partition is an error; an offset never written
    /// is `Ok(None)`.
    async fn read(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, BrokerError> {
        self.shared
            .lock()
            .logs()
            .read(partition, offset)
            .map(Option::<&Record>::cloned)
    }

    /// The topic's partition count; asking never creates the topic.
    async fn partitions(&self, topic: &str) -> Result<Option<i32>, BrokerError> {
        Ok(self.partition_count(topic))
    }
}
