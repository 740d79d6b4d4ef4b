//! An in-memory [`DeferStore`] (its reads; its writes are inherent).

use prosody_contracts::broker::TopicPartition;
use prosody_contracts::hash::FastMap;
use prosody_contracts::key::Key;
use prosody_contracts::store::StoreError;
use prosody_contracts::store::defer::{DeferCounts, DeferStore, Deferral, Deferred};
use std::collections::BTreeSet;
use std::future::{Future, ready};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The deferred offsets of one key and the failure count of the first.
///
/// Invariant: `offsets` is not empty (an emptied queue is removed at once,
/// see [`Queues`]); `failures` counts the failed attempts of its first
/// offset.
#[derive(Debug, Default)]
struct Queue {
    offsets: BTreeSet<i64>,
    failures: u32,
}

impl Queue {
    fn head(&self) -> Option<i64> {
        self.offsets.first().copied()
    }

    fn to_deferred(&self) -> Deferred {
        Deferred {
            offsets: self.offsets.iter().copied().collect(),
            failures: self.failures,
        }
    }
}

/// One partition's queues, by key, and the offsets they hold in all.
///
/// Invariant: `records` is the sum of the queues' lengths, kept by every
/// write (so reading it scans nothing); the partition's deferred keys are
/// the keys of `keys`.
#[derive(Debug, Default)]
struct Partition {
    keys: FastMap<Key, Queue>,
    records: u64,
}

/// Every queue, by partition, then by key.
///
/// Invariant: no partition maps to an empty key map and no key to an empty
/// queue, so a key is present exactly when it has deferred offsets, and
/// the keys of a partition's map are the partition's deferred keys.
///
/// Removal path (what keeps memory proportional to the offsets deferred and
/// not yet completed): completing a key's last offset removes its queue,
/// and removing a partition's last queue removes the partition's map.
/// There is no capacity: a deferred offset is a settled message the store
/// must not forget (at-least-once), and the defer stage drains a key's
/// queue as its retries succeed.
#[derive(Debug, Default)]
struct Queues {
    by_partition: FastMap<TopicPartition, Partition>,
}

impl Queues {
    fn queue(&self, partition: &TopicPartition, key: &Key) -> Option<&Queue> {
        self.by_partition.get(partition)?.keys.get(key)
    }

    fn counts(&self, partition: &TopicPartition) -> DeferCounts {
        self.by_partition
            .get(partition)
            .map_or_else(DeferCounts::default, |part| DeferCounts {
                keys: u64::try_from(part.keys.len()).unwrap_or(u64::MAX),
                records: part.records,
            })
    }

    fn defer(&mut self, partition: &TopicPartition, key: &Key, offset: i64, deferral: Deferral) {
        let part = self.by_partition.entry(partition.clone()).or_default();
        let queue = part.keys.entry(key.clone()).or_default();
        if queue.offsets.insert(offset) {
            part.records += 1;
            // A new head starts with the count of how it was deferred.
            if queue.head() == Some(offset) {
                queue.failures = deferral.failures();
            }
        }
    }

    fn complete(&mut self, partition: &TopicPartition, key: &Key, offset: i64) -> Option<i64> {
        let part = self.by_partition.get_mut(partition)?;
        let queue = part.keys.get_mut(key)?;
        if queue.head() != Some(offset) {
            return queue.head();
        }
        queue.offsets.pop_first();
        queue.failures = 0;
        part.records = part.records.saturating_sub(1);
        let next = queue.head();
        if next.is_none() {
            part.keys.remove(key);
            if part.keys.is_empty() {
                self.by_partition.remove(partition);
            }
        }
        next
    }

    fn failed(&mut self, partition: &TopicPartition, key: &Key) -> u32 {
        self.by_partition
            .get_mut(partition)
            .and_then(|part| part.keys.get_mut(key))
            .map_or(0, |queue| {
                queue.failures = queue.failures.saturating_add(1);
                queue.failures
            })
    }
}

/// A defer store in memory; clones share the same queues.
///
/// Its writes are inherent methods, which
/// [`MemoryStores`](crate::MemoryStores) commits through; those stores pass
/// the shared conformance suite (`prosody_conformance::store::defer`, see
/// `tests/suite/defer.rs`).
/// Memory holds one entry per key with deferred offsets and one per such
/// offset: a key's entry is removed when its last offset completes (see the
/// removal path on the internal `Queues` type). Nothing is bounded by a
/// capacity, since forgetting a deferred message would lose it.
#[derive(Clone, Debug, Default)]
pub struct MemoryDeferStore {
    queues: Arc<Mutex<Queues>>,
}

impl MemoryDeferStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Locks the queues. Nothing panics while holding the lock, so a
    /// poisoned lock still guards consistent queues and is recovered.
    fn lock(&self) -> MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many keys, over all partitions, have deferred offsets: the
    /// entries the store holds besides the offsets themselves.
    #[must_use]
    pub fn stored_keys(&self) -> usize {
        self.lock()
            .by_partition
            .values()
            .map(|part| part.keys.len())
            .sum()
    }
}

impl MemoryDeferStore {
    /// Adds `offset` to the key's queue: what a commit's
    /// [`DeferWrite::Defer`] does.
    ///
    /// [`DeferWrite::Defer`]: prosody_contracts::store::DeferWrite::Defer
    pub fn defer(&self, partition: &TopicPartition, key: &Key, offset: i64, deferral: Deferral) {
        self.lock().defer(partition, key, offset, deferral);
    }

    /// Removes `offset` if it is the head: what a commit's
    /// [`DeferWrite::Complete`] does.
    ///
    /// [`DeferWrite::Complete`]: prosody_contracts::store::DeferWrite::Complete
    pub fn complete(&self, partition: &TopicPartition, key: &Key, offset: i64) {
        self.lock().complete(partition, key, offset);
    }

    /// Counts one more failure of the head, if the key has one: what a
    /// commit's [`DeferWrite::Failed`] does.
    ///
    /// [`DeferWrite::Failed`]: prosody_contracts::store::DeferWrite::Failed
    pub fn failed(&self, partition: &TopicPartition, key: &Key) {
        self.lock().failed(partition, key);
    }
}

impl DeferStore for MemoryDeferStore {
    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        Some(self.lock().queue(partition, key).is_some())
    }

    fn counts(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<DeferCounts, StoreError>> + Send {
        ready(Ok(self.lock().counts(partition)))
    }

    /// Always answers: the counts live in memory.
    fn counts_now(&self, partition: &TopicPartition) -> Option<DeferCounts> {
        Some(self.lock().counts(partition))
    }

    fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Deferred>, StoreError>> + Send {
        ready(Ok(self
            .lock()
            .queue(partition, key)
            .map(Queue::to_deferred)))
    }
}

#[cfg(test)]
mod tests {
    use super::{MemoryDeferStore, Queues};
    use prosody_contracts::broker::TopicPartition;
    use prosody_contracts::key::Key;
    use prosody_contracts::store::Deferral::AfterFailure;

    /// Draining every key of a partition removes the partition's map too,
    /// so partitions once used leave nothing behind.
    #[test]
    fn drained_partitions_leave_nothing_behind() {
        let mut queues = Queues::default();
        let (tp, a, b) = (TopicPartition::new("t", 0), Key::from("a"), Key::from("b"));
        queues.defer(&tp, &a, 1, AfterFailure);
        queues.defer(&tp, &b, 2, AfterFailure);
        assert_eq!(queues.complete(&tp, &a, 1), None);
        assert_eq!(queues.by_partition.len(), 1);
        assert_eq!(queues.complete(&tp, &b, 2), None);
        assert!(queues.by_partition.is_empty());
        assert_eq!(queues.failed(&tp, &a), 0);
        assert!(queues.by_partition.is_empty(), "failed created an entry");
    }

    /// Clones share the same queues.
    #[test]
    fn clones_share_state() {
        let store = MemoryDeferStore::new();
        let clone = store.clone();
        clone.lock().defer(
            &TopicPartition::new("t", 0),
            &Key::from("k"),
            3,
            AfterFailure,
        );
        assert_eq!(store.stored_keys(), 1);
    }
}
