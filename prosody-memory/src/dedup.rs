//! An in-memory [`DedupStore`] on tokio's clock.

use prosody_core::store::StoreError;
use prosody_core::store::dedup::{DedupKey, DedupStore};
use std::collections::{BTreeSet, HashMap};
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

/// The entries and their expiry index.
///
/// Invariant: `by_expiry` holds exactly the pairs `(expiry, key)` of
/// `expiry_of`, so its first pairs are the entries that expire first.
///
/// Removal path (what keeps memory bounded by live entries): an entry is
/// removed when [`Entries::contains`] finds it expired, when it is inserted
/// again (its old expiry is replaced), and by the sweep every call makes,
/// which removes up to [`SWEEP_LIMIT`] expired entries from the front of
/// `by_expiry`. A call therefore adds at most one entry and removes up to
/// [`SWEEP_LIMIT`] expired ones, so after an insert the store holds either
/// only live entries or fewer entries than before it: the count never
/// exceeds the largest number of live entries the store has had. And never
/// the store's capacity: a full store forgets the entry closest to
/// expiring (a duplicate of it may then be handled again: at-least-once).
#[derive(Debug, Default)]
struct Entries {
    expiry_of: HashMap<DedupKey, Expiry, foldhash::fast::RandomState>,
    by_expiry: BTreeSet<(Expiry, DedupKey)>,
}

impl Entries {
    fn remove(&mut self, key: DedupKey) {
        if let Some(expiry) = self.expiry_of.remove(&key) {
            self.by_expiry.remove(&(expiry, key));
        }
    }

    /// Removes up to [`SWEEP_LIMIT`] expired entries, earliest first.
    fn sweep(&mut self, now: Instant) {
        for _ in 0..SWEEP_LIMIT {
            match self.by_expiry.first() {
                Some(&(expiry, key)) if expiry.is_past(now) => self.remove(key),
                _ => break,
            }
        }
    }

    fn contains(&mut self, key: DedupKey, now: Instant) -> bool {
        self.sweep(now);
        match self.expiry_of.get(&key) {
            Some(expiry) if expiry.is_past(now) => {
                self.remove(key);
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    fn insert(&mut self, key: DedupKey, ttl: Duration, now: Instant, capacity: usize) {
        self.sweep(now);
        self.remove(key);
        // Full: forget the entry closest to expiring.
        while self.expiry_of.len() >= capacity {
            match self.by_expiry.first() {
                Some(&(_, oldest)) => self.remove(oldest),
                None => break,
            }
        }
        let expiry = Expiry::after(now, ttl);
        self.expiry_of.insert(key, expiry);
        self.by_expiry.insert((expiry, key));
    }
}

/// A dedup store in memory; clones share the same entries.
///
/// Expiry runs on tokio's clock, so under a paused clock advancing time
/// expires entries. It passes the shared conformance suite
/// (`prosody_core::store::conformance::dedup`, see `tests/dedup.rs`).
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
    /// forgetting the one closest to expiring when full.
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

    fn insert(
        &self,
        key: DedupKey,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.lock().insert(key, ttl, Instant::now(), self.capacity);
        ready(Ok(()))
    }
}
