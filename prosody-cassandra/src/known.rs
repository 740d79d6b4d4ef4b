//! What this member knows of the deferrals of the partitions it owns: the
//! keys with deferrals (loaded at open, so [`Known::peek`] answers for
//! every other key without a read), a bounded cache of keys' deferral
//! state (so a commit's read-modify-write of a key reads it at most once
//! while it stays cached), and the partition's deferred keys and records
//! (read at open, then kept by each commit, so counting scans nothing).
//! Only the owner writes a partition, so what it knows stays true until it
//! lets the partition go; a write whose outcome is unknown makes its keys
//! unsure until read again.

use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::defer::{DeferCounts, Deferred};
use quick_cache::sync::Cache;
use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A key's deferral state as of one ownership of its partition.
type Entry = (TopicPartition, u64, Key);

/// What this member knows of one partition it owns.
///
/// Invariant: while `complete`, `keys` holds exactly the partition's keys
/// with deferrals, except those in `unsure` (whose state is unknown until
/// read); `epoch` names this ownership, so cache entries of an earlier one
/// are never read. `counts` counts every key as its last known state (for
/// a key in `unsure`, as the state its unsure write would have left, whose
/// length `unsure` keeps), including the commits planned and not yet
/// landed: reading an unsure key corrects `counts` by the difference.
#[derive(Debug)]
struct Owned {
    epoch: u64,
    keys: HashSet<Key>,
    complete: bool,
    unsure: HashMap<Key, usize>,
    counts: DeferCounts,
}

/// What this member knows of a key's deferral state.
pub(crate) enum Knowledge {
    /// Its state, without a read.
    Known(Option<Deferred>),
    /// Only a read tells.
    Unknown,
}

/// The partitions this member owns, and the cache of keys' states.
pub(crate) struct Known {
    owned: Mutex<HashMap<TopicPartition, Owned>>,
    cache: Cache<Entry, Option<Deferred>>,
    epochs: AtomicU64,
    /// The most keys with deferrals a partition keeps in `keys`.
    keys_cap: usize,
}

/// The number of offsets of a key's state.
pub(crate) fn length(state: Option<&Deferred>) -> usize {
    state.map_or(0, |state| state.offsets.len())
}

impl Known {
    pub(crate) fn new(cache_size: NonZeroUsize) -> Self {
        Self {
            owned: Mutex::new(HashMap::new()),
            cache: Cache::new(cache_size.get()),
            epochs: AtomicU64::new(0),
            keys_cap: cache_size.get().saturating_mul(8),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<TopicPartition, Owned>> {
        self.owned.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the key has deferrals, when known without a read.
    pub(crate) fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        let owned = self.lock();
        let part = owned.get(partition)?;
        if part.unsure.contains_key(key) {
            None
        } else if part.keys.contains(key) {
            Some(true)
        } else {
            part.complete.then_some(false)
        }
    }

    /// The partition's counts, if this member owns it.
    pub(crate) fn counts(&self, partition: &TopicPartition) -> Option<DeferCounts> {
        self.lock().get(partition).map(|part| part.counts)
    }

    /// The partition's epoch, if owned, and what is known of the key.
    pub(crate) fn known(&self, partition: &TopicPartition, key: &Key) -> Option<(u64, Knowledge)> {
        let epoch = self.lock().get(partition)?.epoch;
        if self.peek(partition, key) == Some(false) {
            return Some((epoch, Knowledge::Known(None)));
        }
        let cached = self.cache.get(&(partition.clone(), epoch, key.clone()));
        Some((epoch, cached.map_or(Knowledge::Unknown, Knowledge::Known)))
    }

    /// The key's state as read or written in ownership `epoch`. A key that
    /// was unsure is counted as it is now.
    pub(crate) fn record(
        &self,
        partition: &TopicPartition,
        epoch: u64,
        key: &Key,
        state: Option<&Deferred>,
    ) {
        let mut owned = self.lock();
        let Some(part) = owned.get_mut(partition).filter(|part| part.epoch == epoch) else {
            return;
        };
        if let Some(counted) = part.unsure.remove(key) {
            part.counts = part.counts.changed(counted, length(state));
        }
        if state.is_some() {
            part.keys.insert(key.clone());
        } else {
            part.keys.remove(key);
        }
        if part.keys.len() > self.keys_cap {
            // Too many to hold: ask the store for keys not cached.
            part.keys.clear();
            part.complete = false;
        }
        drop(owned);
        self.cache
            .insert((partition.clone(), epoch, key.clone()), state.cloned());
    }

    /// Counts a commit's changes of keys (each key's offsets before and
    /// after) in ownership `epoch`, and returns the counts they leave with
    /// a write timestamp `stamp` takes at the same moment, so a later
    /// count is written with a later timestamp; `None` if the partition is
    /// not owned in that epoch.
    pub(crate) fn plan(
        &self,
        partition: &TopicPartition,
        epoch: u64,
        changes: impl IntoIterator<Item = (usize, usize)>,
        stamp: impl FnOnce() -> i64,
    ) -> Option<(DeferCounts, i64)> {
        let mut owned = self.lock();
        let part = owned
            .get_mut(partition)
            .filter(|part| part.epoch == epoch)?;
        for (before, after) in changes {
            part.counts = part.counts.changed(before, after);
        }
        Some((part.counts, stamp()))
    }

    /// A write of the key, counted as leaving `counted` offsets, may or
    /// may not have landed.
    pub(crate) fn unsure(&self, partition: &TopicPartition, epoch: u64, key: &Key, counted: usize) {
        let mut owned = self.lock();
        if let Some(part) = owned.get_mut(partition).filter(|part| part.epoch == epoch) {
            part.keys.remove(key);
            part.unsure.insert(key.clone(), counted);
        }
        drop(owned);
        self.cache.remove(&(partition.clone(), epoch, key.clone()));
    }

    /// This member owns the partition now, whose keys with deferrals are
    /// `keys` and whose counts are `counts`.
    pub(crate) fn open(&self, partition: &TopicPartition, keys: Vec<Key>, counts: DeferCounts) {
        let epoch = self.epochs.fetch_add(1, Ordering::Relaxed) + 1;
        let complete = keys.len() <= self.keys_cap;
        let keys = if complete {
            keys.into_iter().collect()
        } else {
            HashSet::new()
        };
        self.lock().insert(
            partition.clone(),
            Owned {
                epoch,
                keys,
                complete,
                unsure: HashMap::new(),
                counts,
            },
        );
    }

    pub(crate) fn close(&self, partition: &TopicPartition) {
        self.lock().remove(partition);
    }
}

#[cfg(test)]
mod tests {
    use super::Known;
    use prosody_contracts::broker::TopicPartition;
    use prosody_contracts::key::Key;
    use prosody_contracts::store::defer::{DeferCounts, Deferred};
    use std::num::NonZeroUsize;

    /// A write whose outcome is unknown counts as planned until its key is
    /// read again, then as read.
    #[test]
    fn an_unsure_key_is_counted_again_when_read() {
        let known = Known::new(NonZeroUsize::MIN);
        let (tp, key) = (TopicPartition::new("t", 0), Key::from("k"));
        known.open(
            &tp,
            vec![key.clone()],
            DeferCounts {
                keys: 1,
                records: 2,
            },
        );
        let epoch = 1;
        let planned = known.plan(&tp, epoch, [(2, 3)], || 7);
        assert_eq!(
            planned,
            Some((
                DeferCounts {
                    keys: 1,
                    records: 3
                },
                7
            ))
        );
        known.unsure(&tp, epoch, &key, 3);
        let read = Deferred {
            offsets: vec![1, 2],
            failures: 0,
        };
        known.record(&tp, epoch, &key, Some(&read));
        assert_eq!(
            known.counts(&tp),
            Some(DeferCounts {
                keys: 1,
                records: 2
            })
        );
        known.record(&tp, epoch, &key, None);
        assert_eq!(
            known.counts(&tp),
            Some(DeferCounts {
                keys: 1,
                records: 2
            }),
            "a read of a key that was not unsure changes no count"
        );
    }
}
