//! An in-memory [`DedupStore`] on tokio's clock.

use prosody_contracts::store::StoreError;
use prosody_contracts::store::dedup::{DedupKey, DedupStore};
use std::collections::{HashMap, VecDeque};
use std::future::{Future, ready};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Expired entries removed at most per store call besides the key it names.
const SWEEP_LIMIT: usize = 32;

/// Entries a store keeps unless told otherwise: 65,536, about 6 MiB. An
/// in-memory store lives as long as its process, where the duplicates it
/// must catch are the redeliveries after a rebalance: at most the records
/// a partition held unsettled, far fewer than this.
pub const DEFAULT_CAPACITY: usize = 1 << 16;

/// When an entry expires; `Never` for a ttl past the clock's range. Ordered
/// so that every `At` comes before `Never`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Expiry {
    At(Instant),
    Never,
}

impl Expiry {
    fn after(now: Instant, ttl: Duration) -> Self {
        now.checked_add(ttl).map_or(Self::Never, Self::At)
    }

    /// An entry is live strictly before its expiry.
    fn is_past(self, now: Instant) -> bool {
        match self {
            Self::At(at) => now >= at,
            Self::Never => false,
        }
    }
}

/// The entries and their expiry queue.
///
/// Invariant: `queue` holds a pair `(expiry, key, insert)` for every entry
/// of `expiry_of`, in the order of their inserts (numbered by `inserts`); a
/// pair whose key was inserted again since, or removed, is stale and is
/// skipped. With the
/// one ttl a client uses, the front of the queue is the entry that expires
/// first, so an insert costs a push and a hash, not an ordered index.
///
/// Removal path (what keeps memory bounded by live entries): an entry is
/// removed when [`Entries::contains`] finds it expired, when it is inserted
/// again (its old expiry is replaced), and by the sweep every call makes,
/// which pops up to [`SWEEP_LIMIT`] expired pairs off the front of the
/// queue. A call therefore adds at most one entry and removes
/// up to [`SWEEP_LIMIT`] expired ones, so after an insert the store holds
/// either only live entries or fewer entries than before it: the count
/// never exceeds the largest number of live entries the store has had
/// (with one ttl; an entry of a shorter ttl behind a longer one waits for
/// it, or for a lookup). And never the store's capacity: a full store
/// forgets its oldest entry (a duplicate of it may then be handled again:
/// at-least-once). Stale pairs are dropped from the queue whenever it holds
/// more than twice the capacity, so it stays bounded too.
#[derive(Debug, Default)]
struct Entries {
    /// Each entry's expiry, and the number of the insert that made it.
    expiry_of: HashMap<DedupKey, (Expiry, u64), foldhash::fast::RandomState>,
    queue: VecDeque<(Expiry, DedupKey, u64)>,
    inserts: u64,
}

impl Entries {
    /// Whether the pair of `key`'s insert number `insert` is current.
    fn current(&self, key: DedupKey, insert: u64) -> bool {
        self.expiry_of
            .get(&key)
            .is_some_and(|&(_, made)| made == insert)
    }

    /// Pops up to [`SWEEP_LIMIT`] expired pairs off the front, removing
    /// the entries that are still theirs. A pair not expired ends the sweep
    /// without a lookup: a stale one waits for its expiry, an eviction or a
    /// compaction.
    fn sweep(&mut self, now: Instant) {
        for _ in 0..SWEEP_LIMIT {
            match self.queue.front() {
                Some(&(expiry, key, insert)) if expiry.is_past(now) => {
                    if self.current(key, insert) {
                        self.expiry_of.remove(&key);
                    }
                }
                _ => break,
            }
            self.queue.pop_front();
        }
    }

    fn contains(&mut self, key: DedupKey, now: Instant) -> bool {
        self.sweep(now);
        match self.expiry_of.get(&key) {
            Some((expiry, _)) if expiry.is_past(now) => {
                self.expiry_of.remove(&key);
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    fn insert(&mut self, key: DedupKey, ttl: Duration, now: Instant, capacity: usize) {
        self.sweep(now);
        let expiry = Expiry::after(now, ttl);
        let insert = self.inserts;
        self.inserts = self.inserts.wrapping_add(1);
        self.expiry_of.insert(key, (expiry, insert));
        self.queue.push_back((expiry, key, insert));
        // Full: forget the oldest entry.
        while self.expiry_of.len() > capacity {
            let Some((_, oldest, made)) = self.queue.pop_front() else {
                break;
            };
            if self.current(oldest, made) {
                self.expiry_of.remove(&oldest);
            }
        }
        if self.queue.len() > capacity.saturating_mul(2) {
            let expiry_of = &self.expiry_of;
            self.queue.retain(|&(_, key, insert)| {
                expiry_of.get(&key).is_some_and(|&(_, made)| made == insert)
            });
        }
    }
}

/// A dedup store in memory; clones share the same entries.
///
/// Expiry runs on tokio's clock, so under a paused clock advancing time
/// expires entries. Its one write, [`insert`](Self::insert), is inherent;
/// [`MemoryStores`](crate::MemoryStores) commits through it, and those
/// stores pass the shared conformance suite
/// (`prosody_conformance::store::dedup`, see `tests/suite/dedup.rs`).
/// Memory holds live entries plus expired ones not yet swept, never more
/// than its capacity; see the removal path on the (internal) `Entries` type.
#[derive(Clone, Debug)]
pub struct MemoryDedupStore {
    entries: Arc<Mutex<Entries>>,
    capacity: usize,
}

impl Default for MemoryDedupStore {
    fn default() -> Self {
        Self::with_capacity(DEFAULT_CAPACITY)
    }
}

impl MemoryDedupStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store that keeps at most `capacity` entries (at least one),
    /// forgetting the oldest when full.
    #[must_use]
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            entries: Arc::default(),
            capacity: capacity.max(1),
        }
    }

    /// Locks the entries. Nothing panics while holding the lock, so a
    /// poisoned lock still guards consistent entries and is recovered.
    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `key` for `ttl` from now, replacing any earlier expiry:
    /// what a commit's [`DedupWrite`] does.
    ///
    /// [`DedupWrite`]: prosody_contracts::store::DedupWrite
    pub fn insert(&self, key: DedupKey, ttl: Duration) {
        self.lock().insert(key, ttl, Instant::now(), self.capacity);
    }

    /// How many entries the store holds, live or expired but not yet
    /// removed: what its memory is proportional to.
    #[must_use]
    pub fn stored_entries(&self) -> usize {
        self.lock().expiry_of.len()
    }
}

impl DedupStore for MemoryDedupStore {
    fn contains(&self, key: DedupKey) -> impl Future<Output = Result<bool, StoreError>> + Send {
        ready(Ok(self.lock().contains(key, Instant::now())))
    }

    fn contains_now(&self, key: DedupKey) -> Option<bool> {
        Some(self.lock().contains(key, Instant::now()))
    }
}

#[cfg(test)]
mod tests {
    use super::Entries;
    use prosody_contracts::store::dedup::DedupKey;
    use std::time::Duration;
    use tokio::time::Instant;

    /// Inserting the same keys again and again leaves stale pairs behind a
    /// live entry the sweep stops at, and they are dropped: the queue stays
    /// within twice the capacity.
    #[test]
    fn the_queue_stays_bounded_when_keys_come_again() {
        let mut entries = Entries::default();
        let now = Instant::now();
        let ttl = Duration::from_secs(60);
        let key = |n: u32| DedupKey::new("1", "k", &n.to_string());
        // Live and current at the front: the sweep stops here.
        entries.insert(key(0), ttl, now, 10);
        for n in 0..10_000u32 {
            entries.insert(key(1 + n % 5), ttl, now, 10);
            assert!(entries.expiry_of.len() <= 10);
            assert!(
                entries.queue.len() <= 20,
                "{} pairs queued",
                entries.queue.len()
            );
        }
        // Each key kept is found, and its pair is current.
        assert_eq!(entries.expiry_of.len(), 6);
        for (key, (expiry, insert)) in &entries.expiry_of {
            assert!(entries.queue.contains(&(*expiry, *key, *insert)));
        }
    }
}
