//! The in-memory stores of one client, together.

use crate::{
    MemoryDedupStore, MemoryDeferStore, MemoryPeerDirectory, MemoryStateStore, MemoryTimerStore,
};
use bytes::Bytes;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::clock::Timestamp;
use prosody_contracts::key::Key;
use prosody_contracts::store::{
    Batch, DedupKey, DedupStore, DedupWrite, DeferCounts, DeferStore, DeferWrite, Deferred,
    Direction, ItemRange, StateStore, StoreError, Stores, TimerChange, TimerEntry, TimerKind,
    TimerStore, TimerWrite,
};
use std::future::{Future, ready};

/// A client's timers, deferrals, keyed state and dedup records, and the
/// peer directory, in memory; clones share them (so several clients of a
/// test can share one set, as members of a group share Cassandra, and
/// every group the directory).
///
/// What is atomic: each write takes its store's lock on its own, so a
/// batch ([`Stores::commit`], or at once [`Stores::commit_now`]) is
/// applied write by write; since no write fails, every batch lands whole,
/// but a read running meanwhile may see part of it. Nothing outlives the
/// process: on Kafka, deferred records and timers are lost when it stops.
///
/// # Examples
///
/// One attempt's writes, a timer and a dedup record, committed together
/// and read back:
///
/// ```
/// use prosody_contracts::broker::TopicPartition;
/// use prosody_contracts::store::{Batch, DedupKey, DedupStore, DedupWrite, Stores, TimerChange, TimerKind, TimerStore};
/// use prosody_contracts::{Key, Timestamp};
/// use prosody_memory::MemoryStores;
/// use std::time::Duration;
///
/// #[tokio::main(flavor = "current_thread")]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let stores = MemoryStores::new();
///     let partition = TopicPartition::new("orders", 0);
///     let key = Key::from("order-7");
///     let reminder = Timestamp::from_millis(1_700_000_060_000);
///     let handled = DedupKey::new("1", "order-7", "event-41");
///
///     let mut batch = Batch::default().timer(&key, TimerKind::Application, TimerChange::Schedule { time: reminder, trace: None });
///     batch.dedup.push(DedupWrite { key: handled, ttl: Duration::from_secs(86_400) });
///     stores.commit(&partition, batch).await?;
///
///     assert_eq!(stores.scheduled(&partition, &key, TimerKind::Application).await?, [reminder]);
///     assert!(stores.contains(handled).await?);
///     Ok(())
/// }
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryStores {
    timers: MemoryTimerStore,
    deferred: MemoryDeferStore,
    dedup: MemoryDedupStore,
    state: MemoryStateStore,
    peers: MemoryPeerDirectory,
}

impl MemoryStores {
    /// Empty stores.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores over these three (each shared with its other clones).
    #[must_use]
    pub fn from_parts(
        timers: MemoryTimerStore,
        deferred: MemoryDeferStore,
        dedup: MemoryDedupStore,
    ) -> Self {
        Self {
            timers,
            deferred,
            dedup,
            state: MemoryStateStore::default(),
            peers: MemoryPeerDirectory::default(),
        }
    }

    /// The timer store.
    #[must_use]
    pub fn timers(&self) -> &MemoryTimerStore {
        &self.timers
    }

    /// The defer store.
    #[must_use]
    pub fn deferred(&self) -> &MemoryDeferStore {
        &self.deferred
    }

    /// The dedup store.
    #[must_use]
    pub fn dedup(&self) -> &MemoryDedupStore {
        &self.dedup
    }

    /// The keyed-state store.
    #[must_use]
    pub fn state(&self) -> &MemoryStateStore {
        &self.state
    }

    /// The peer directory.
    #[must_use]
    pub fn peers(&self) -> &MemoryPeerDirectory {
        &self.peers
    }
}

impl MemoryStores {
    /// Applies a batch write by write, in its order, each write under its
    /// store's lock. No write fails.
    fn write(&self, partition: &TopicPartition, batch: Batch) {
        for TimerWrite { key, kind, change } in batch.timers {
            match change {
                TimerChange::Schedule { time, trace } => {
                    let entry = TimerEntry {
                        key,
                        time,
                        kind,
                        trace,
                    };
                    self.timers.schedule(partition, entry);
                }
                TimerChange::Unschedule { time } => {
                    self.timers.unschedule(partition, &key, kind, time);
                }
                TimerChange::Clear => self.timers.clear(partition, &key, kind),
            }
        }
        for write in batch.deferrals {
            match write {
                DeferWrite::Defer {
                    key,
                    offset,
                    deferral,
                } => self.deferred.defer(partition, &key, offset, deferral),
                DeferWrite::Complete { key, offset } => {
                    self.deferred.complete(partition, &key, offset);
                }
                DeferWrite::Failed { key } => self.deferred.failed(partition, &key),
            }
        }
        for write in batch.state {
            self.state.write(partition, write);
        }
        for DedupWrite { key, ttl } in batch.dedup {
            self.dedup.insert(key, ttl);
        }
    }
}

impl TimerStore for MemoryStores {
    fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> impl Future<Output = Result<Vec<Timestamp>, StoreError>> + Send {
        self.timers.scheduled(partition, key, kind)
    }

    fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> impl Future<Output = Result<Vec<TimerEntry>, StoreError>> + Send {
        self.timers.load(partition, from, until)
    }
}

impl DeferStore for MemoryStores {
    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        self.deferred.peek(partition, key)
    }

    fn counts(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<DeferCounts, StoreError>> + Send {
        self.deferred.counts(partition)
    }

    fn counts_now(&self, partition: &TopicPartition) -> Option<DeferCounts> {
        self.deferred.counts_now(partition)
    }

    fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Deferred>, StoreError>> + Send {
        DeferStore::deferred(&self.deferred, partition, key)
    }
}

impl DedupStore for MemoryStores {
    fn contains(&self, key: DedupKey) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.dedup.contains(key)
    }

    fn contains_now(&self, key: DedupKey) -> Option<bool> {
        self.dedup.contains_now(key)
    }
}

impl StateStore for MemoryStores {
    fn identify(
        &self,
        name: &str,
        identity: &str,
    ) -> impl Future<Output = Result<String, StoreError>> + Send {
        self.state.identify(name, identity)
    }

    fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> impl Future<Output = Result<Option<Bytes>, StoreError>> + Send {
        self.state.cell(partition, collection, key, item)
    }

    fn cells(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        range: &ItemRange,
        direction: Direction,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Bytes, Bytes)>, StoreError>> + Send {
        self.state
            .cells(partition, collection, key, range, direction, limit)
    }
}

impl Stores for MemoryStores {
    /// The data dies with the process.
    fn durable(&self) -> bool {
        false
    }

    /// Applies the batch now, write by write; it never fails.
    fn commit(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.write(partition, batch);
        ready(Ok(()))
    }

    /// Takes every batch: applies it now, as [`commit`](Self::commit)
    /// does.
    fn commit_now(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        self.write(partition, batch);
        Ok(Ok(()))
    }
}
