//! An in-memory [`TimerStore`] (its reads; its writes are inherent), laid out like the persistent ones: slabs of
//! time per partition, plus an index by key.

use prosody_contracts::Timestamp;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::hash::FastMap;
use prosody_contracts::key::Key;
use prosody_contracts::store::StoreError;
use prosody_contracts::store::timer::{
    SlabSize, TimerEntry, TimerKind, TimerStore, from_seconds, to_seconds,
};
use std::collections::{BTreeMap, BTreeSet};
use std::future::{Future, ready};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The W3C `traceparent` a timer was scheduled with, if any.
type Trace = Option<Arc<str>>;

/// One slab: its timers as (whole seconds since the epoch, key, kind), in
/// the order `load` returns them. Per timer it holds the time inline, the key's
/// shared pointer and the trace's, and no allocation of its own.
type Slab = BTreeMap<(i64, Key, TimerKind), Trace>;

/// The timers of one partition.
///
/// Invariant: `slabs` and `keys` hold the same timers. A timer of kind `c`
/// at `t` seconds for key `k` is in `slabs[slab_of(t)]` under `(t, k, c)`
/// exactly when `(c, t)` is in `keys[k]`. No slab and no key's set is
/// empty.
///
/// Removal path: a timer leaves both maps when it is unscheduled or its key
/// cleared, and a slab or a key whose last timer left is dropped at once, so
/// memory is proportional to the timers the partition holds. There is no
/// capacity: like a persistent backend, the store keeps every timer until
/// it is removed (its user unschedules timers once they have fired).
#[derive(Debug, Default)]
struct PartitionTimers {
    slabs: BTreeMap<i64, Slab>,
    keys: FastMap<Key, BTreeSet<(TimerKind, i64)>>,
}

impl PartitionTimers {
    fn schedule(&mut self, slab_size: SlabSize, entry: TimerEntry) {
        let seconds = to_seconds(entry.time);
        self.keys
            .entry(entry.key.clone())
            .or_default()
            .insert((entry.kind, seconds));
        self.slabs
            .entry(slab_size.slab_of_seconds(seconds))
            .or_default()
            .insert((seconds, entry.key, entry.kind), entry.trace);
    }

    /// Removes `(seconds, key, kind)` from its slab, dropping the slab if it
    /// empties.
    fn remove_from_slab(&mut self, slab_size: SlabSize, timer: &(i64, Key, TimerKind)) {
        let slab = slab_size.slab_of_seconds(timer.0);
        if let Some(timers) = self.slabs.get_mut(&slab) {
            timers.remove(timer);
            if timers.is_empty() {
                self.slabs.remove(&slab);
            }
        }
    }

    fn unschedule(&mut self, slab_size: SlabSize, key: &Key, kind: TimerKind, seconds: i64) {
        let Some(times) = self.keys.get_mut(key) else {
            return;
        };
        if times.remove(&(kind, seconds)) {
            if times.is_empty() {
                self.keys.remove(key);
            }
            self.remove_from_slab(slab_size, &(seconds, key.clone(), kind));
        }
    }

    fn clear(&mut self, slab_size: SlabSize, key: &Key, kind: TimerKind) {
        let Some(times) = self.keys.get_mut(key) else {
            return;
        };
        let of_kind: Vec<i64> = times
            .range((kind, i64::MIN)..=(kind, i64::MAX))
            .map(|&(_, seconds)| seconds)
            .collect();
        for &seconds in &of_kind {
            times.remove(&(kind, seconds));
        }
        if times.is_empty() {
            self.keys.remove(key);
        }
        let mut probe = (0, key.clone(), kind);
        for seconds in of_kind {
            probe.0 = seconds;
            self.remove_from_slab(slab_size, &probe);
        }
    }

    fn scheduled(&self, key: &Key, kind: TimerKind) -> Vec<Timestamp> {
        self.keys
            .get(key)
            .map(|times| {
                times
                    .range((kind, i64::MIN)..=(kind, i64::MAX))
                    .map(|&(_, seconds)| from_seconds(seconds))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The timers in `[from, until)` seconds, reading only the slabs that
    /// range touches.
    fn load(&self, slab_size: SlabSize, from: Timestamp, until: Timestamp) -> Vec<TimerEntry> {
        let Some(slabs) = slab_size.slabs(from, until) else {
            return Vec::new();
        };
        // The empty key and the first kind are the least, so `(t, "", first)`
        // precedes every timer at `t`.
        let lowest = (to_seconds(from), Key::from(""), TimerKind::Application);
        let beyond = (to_seconds(until), lowest.1.clone(), lowest.2);
        self.slabs
            .range(slabs)
            .flat_map(|(_, timers)| {
                timers.range((Bound::Included(&lowest), Bound::Excluded(&beyond)))
            })
            .map(|((seconds, key, kind), trace)| TimerEntry {
                key: key.clone(),
                time: from_seconds(*seconds),
                kind: *kind,
                trace: trace.clone(),
            })
            .collect()
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The timers of every partition.
///
/// Invariant: no partition in `partitions` is empty; an operation that
/// empties one drops it (its removal path, with [`PartitionTimers`]'s).
#[derive(Debug, Default)]
struct Timers {
    partitions: FastMap<TopicPartition, PartitionTimers>,
}

impl Timers {
    /// Runs `change` on a partition's timers if it has any, then drops the
    /// partition if it has none left.
    fn change(&mut self, partition: &TopicPartition, change: impl FnOnce(&mut PartitionTimers)) {
        if let Some(timers) = self.partitions.get_mut(partition) {
            change(timers);
            if timers.is_empty() {
                self.partitions.remove(partition);
            }
        }
    }
}

/// A timer store in memory; clones share the same timers.
///
/// It keeps each partition's timers in slabs of [`SlabSize`] (an hour by
/// default), as times in whole seconds, beside an index from key to times;
/// `load` reads only the slabs its range touches. Memory is proportional to
/// the timers held: per timer, an entry in a slab and one in its key's set,
/// sharing the key's and the trace's allocations with the caller's. Timers
/// stay until unscheduled or cleared; see the removal path on the (internal)
/// `PartitionTimers` type. Its writes are inherent methods, which
/// [`MemoryStores`](crate::MemoryStores) commits through; those stores pass
/// the shared conformance suite (`prosody_conformance::store::timer`, see
/// `tests/suite/timer.rs`).
#[derive(Clone, Debug, Default)]
pub struct MemoryTimerStore {
    timers: Arc<Mutex<Timers>>,
    slab_size: SlabSize,
}

impl MemoryTimerStore {
    /// An empty store with slabs of an hour.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store with slabs of `size` (whole seconds, at least one;
    /// see [`SlabSize::new`]).
    #[must_use]
    pub fn with_slab_size(size: Duration) -> Self {
        Self {
            timers: Arc::default(),
            slab_size: SlabSize::new(size),
        }
    }

    /// The size of the store's slabs.
    #[must_use]
    pub fn slab_size(&self) -> SlabSize {
        self.slab_size
    }

    /// Locks the timers. Nothing panics while holding the lock, so a
    /// poisoned lock still guards consistent timers and is recovered.
    fn lock(&self) -> MutexGuard<'_, Timers> {
        self.timers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many timers the store holds, in every partition.
    #[must_use]
    pub fn stored_timers(&self) -> usize {
        let timers = self.lock();
        timers
            .partitions
            .values()
            .flat_map(|p| p.slabs.values())
            .map(BTreeMap::len)
            .sum()
    }

    /// How many slabs the store holds, in every partition; none is empty.
    #[must_use]
    pub fn stored_slabs(&self) -> usize {
        let timers = self.lock();
        timers.partitions.values().map(|p| p.slabs.len()).sum()
    }

    /// How many (partition, key) pairs the key index holds; each has a timer.
    #[must_use]
    pub fn indexed_keys(&self) -> usize {
        let timers = self.lock();
        timers.partitions.values().map(|p| p.keys.len()).sum()
    }
}

impl MemoryTimerStore {
    /// Adds a timer, or replaces the trace of the same (key, kind, time):
    /// what a commit's [`TimerChange::Schedule`] does.
    ///
    /// [`TimerChange::Schedule`]: prosody_contracts::store::TimerChange::Schedule
    pub fn schedule(&self, partition: &TopicPartition, entry: TimerEntry) {
        self.lock()
            .partitions
            .entry(partition.clone())
            .or_default()
            .schedule(self.slab_size, entry);
    }

    /// Removes the key's timer of `kind` at `time`, if there is one: what a
    /// commit's [`TimerChange::Unschedule`] does.
    ///
    /// [`TimerChange::Unschedule`]: prosody_contracts::store::TimerChange::Unschedule
    pub fn unschedule(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
        time: Timestamp,
    ) {
        let seconds = to_seconds(time);
        self.lock().change(partition, |p| {
            p.unschedule(self.slab_size, key, kind, seconds);
        });
    }

    /// Removes every timer of the key of `kind`: what a commit's
    /// [`TimerChange::Clear`] does.
    ///
    /// [`TimerChange::Clear`]: prosody_contracts::store::TimerChange::Clear
    pub fn clear(&self, partition: &TopicPartition, key: &Key, kind: TimerKind) {
        self.lock()
            .change(partition, |p| p.clear(self.slab_size, key, kind));
    }
}

impl TimerStore for MemoryTimerStore {
    fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> impl Future<Output = Result<Vec<Timestamp>, StoreError>> + Send {
        let times = self
            .lock()
            .partitions
            .get(partition)
            .map(|p| p.scheduled(key, kind))
            .unwrap_or_default();
        ready(Ok(times))
    }

    fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> impl Future<Output = Result<Vec<TimerEntry>, StoreError>> + Send {
        let entries = self
            .lock()
            .partitions
            .get(partition)
            .map(|p| p.load(self.slab_size, from, until))
            .unwrap_or_default();
        ready(Ok(entries))
    }
}
