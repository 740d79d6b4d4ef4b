//! The defer store's tables: per key, the deferred offsets in order with
//! the head's failure count as a static column (`deferred`), and per
//! partition the keys that have any (`deferred_keys`).
//!
//! What this member knows of a partition it owns ([`Owned`]): the keys with
//! deferrals, loaded when it takes the partition, so [`Known::peek`]
//! answers for every other key without a read; and a bounded cache of
//! keys' deferral state, so a commit's read-modify-write of a key reads it
//! at most once while it stays cached. Only the owner writes a partition,
//! so what it knows stays true until it lets the partition go; a write
//! whose outcome is unknown makes its keys unsure until read again.

use crate::Inner;
use crate::error::Classify;
use crate::write::Writes;
use futures_util::TryStreamExt as _;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::defer::{Deferral, Deferred};
use prosody_contracts::store::{DeferWrite, StoreError};
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
/// are never read.
#[derive(Debug)]
struct Owned {
    epoch: u64,
    keys: HashSet<Key>,
    complete: bool,
    unsure: HashSet<Key>,
}

/// What this member knows of a key's deferral state.
enum Knowledge {
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
        if part.unsure.contains(key) {
            None
        } else if part.keys.contains(key) {
            Some(true)
        } else {
            part.complete.then_some(false)
        }
    }

    /// The partition's epoch, if owned, and what is known of the key.
    fn known(&self, partition: &TopicPartition, key: &Key) -> Option<(u64, Knowledge)> {
        let epoch = self.lock().get(partition)?.epoch;
        if self.peek(partition, key) == Some(false) {
            return Some((epoch, Knowledge::Known(None)));
        }
        let cached = self.cache.get(&(partition.clone(), epoch, key.clone()));
        Some((epoch, cached.map_or(Knowledge::Unknown, Knowledge::Known)))
    }

    /// The key's state as read or written in ownership `epoch`.
    fn record(&self, partition: &TopicPartition, epoch: u64, key: &Key, state: Option<&Deferred>) {
        let mut owned = self.lock();
        let Some(part) = owned.get_mut(partition).filter(|part| part.epoch == epoch) else {
            return;
        };
        part.unsure.remove(key);
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

    /// A write of the key may or may not have landed.
    fn unsure(&self, partition: &TopicPartition, epoch: u64, key: &Key) {
        let mut owned = self.lock();
        if let Some(part) = owned.get_mut(partition).filter(|part| part.epoch == epoch) {
            part.keys.remove(key);
            part.unsure.insert(key.clone());
        }
        drop(owned);
        self.cache.remove(&(partition.clone(), epoch, key.clone()));
    }

    fn open(&self, partition: &TopicPartition, keys: Vec<Key>) {
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
                unsure: HashSet::new(),
            },
        );
    }

    pub(crate) fn close(&self, partition: &TopicPartition) {
        self.lock().remove(partition);
    }
}

/// The queue after deferring `offset`.
fn defer(state: Option<Deferred>, offset: i64, deferral: Deferral) -> Deferred {
    let mut state = state.unwrap_or(Deferred {
        offsets: Vec::new(),
        failures: 0,
    });
    if let Err(at) = state.offsets.binary_search(&offset) {
        state.offsets.insert(at, offset);
        if at == 0 {
            state.failures = deferral.failures();
        }
    }
    state
}

/// The queue after completing `offset`: removed if it is the head.
fn complete(state: Option<Deferred>, offset: i64) -> Option<Deferred> {
    let mut state = state?;
    if state.head() == Some(offset) {
        state.offsets.remove(0);
        state.failures = 0;
    }
    (!state.offsets.is_empty()).then_some(state)
}

/// The queue after one more failure of its head.
fn failed(state: Option<Deferred>) -> Option<Deferred> {
    state.map(|mut state| {
        state.failures = state.failures.saturating_add(1);
        state
    })
}

fn key_of(write: &DeferWrite) -> &Key {
    match write {
        DeferWrite::Defer { key, .. }
        | DeferWrite::Complete { key, .. }
        | DeferWrite::Failed { key } => key,
    }
}

/// A key's deferral state before and after a commit.
pub(crate) struct Change {
    key: Key,
    epoch: Option<u64>,
    pub(crate) after: Option<Deferred>,
}

impl Inner {
    /// The key's queue: known, cached, or read.
    pub(crate) async fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        Ok(self.state(partition, key).await?.1)
    }

    async fn state(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<(Option<u64>, Option<Deferred>), StoreError> {
        let epoch = match self.known.known(partition, key) {
            Some((epoch, Knowledge::Known(state))) => return Ok((Some(epoch), state)),
            Some((epoch, Knowledge::Unknown)) => Some(epoch),
            None => None,
        };
        let state = self.read_deferred(partition, key).await?;
        if let Some(epoch) = epoch {
            self.known.record(partition, epoch, key, state.as_ref());
        }
        Ok((epoch, state))
    }

    async fn read_deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        let values = (
            self.group.to_string(),
            partition.topic.to_string(),
            partition.partition,
            key.to_string(),
        );
        let rows: Vec<(Option<i64>, Option<i32>)> = self
            .session
            .execute_iter(self.statements.select_deferred.clone(), values)
            .await
            .map_err(Classify::into_store)?
            .rows_stream::<(Option<i64>, Option<i32>)>()
            .map_err(Classify::into_store)?
            .try_collect()
            .await
            .map_err(Classify::into_store)?;
        let failures = rows.iter().find_map(|(_, failures)| *failures).unwrap_or(0);
        let offsets: Vec<i64> = rows.iter().filter_map(|(offset, _)| *offset).collect();
        Ok((!offsets.is_empty()).then(|| Deferred {
            offsets,
            failures: u32::try_from(failures).unwrap_or(0),
        }))
    }

    /// Every key of the partition with deferred offsets.
    pub(crate) async fn deferred_keys(
        &self,
        partition: &TopicPartition,
    ) -> Result<Vec<Key>, StoreError> {
        let values = (
            self.group.to_string(),
            partition.topic.to_string(),
            partition.partition,
        );
        self.session
            .execute_iter(self.statements.select_deferred_keys.clone(), values)
            .await
            .map_err(Classify::into_store)?
            .rows_stream::<(String,)>()
            .map_err(Classify::into_store)?
            .map_ok(|(key,)| Key::from(key))
            .try_collect()
            .await
            .map_err(Classify::into_store)
    }

    /// Loads what the owner of a partition knows of its deferrals.
    pub(crate) async fn open_deferrals(
        &self,
        partition: &TopicPartition,
    ) -> Result<(), StoreError> {
        let keys = self.deferred_keys(partition).await?;
        self.known.open(partition, keys);
        Ok(())
    }

    /// The statements of a batch's deferral changes: per key, its state
    /// read (or known), the changes applied in order, and the difference
    /// written.
    pub(crate) async fn deferral_writes(
        &self,
        partition: &TopicPartition,
        changes: &[DeferWrite],
        writes: &mut Writes,
    ) -> Result<Vec<Change>, StoreError> {
        let mut keys: Vec<&Key> = Vec::new();
        for write in changes {
            if !keys.contains(&key_of(write)) {
                keys.push(key_of(write));
            }
        }
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let fence = self.fence(partition).await?;
        let mut planned = Vec::with_capacity(keys.len());
        for key in keys {
            let (epoch, before) = self.state(partition, key).await?;
            let mut after = before.clone();
            for write in changes.iter().filter(|write| key_of(write) == key) {
                after = match *write {
                    DeferWrite::Defer {
                        offset, deferral, ..
                    } => Some(defer(after, offset, deferral)),
                    DeferWrite::Complete { offset, .. } => complete(after, offset),
                    DeferWrite::Failed { .. } => failed(after),
                };
            }
            let timestamp = fence.next();
            self.difference(
                partition,
                key,
                (before.as_ref(), after.as_ref()),
                timestamp,
                writes,
            );
            planned.push(Change {
                key: key.clone(),
                epoch,
                after,
            });
        }
        Ok(planned)
    }

    fn difference(
        &self,
        partition: &TopicPartition,
        key: &Key,
        (before, after): (Option<&Deferred>, Option<&Deferred>),
        timestamp: i64,
        writes: &mut Writes,
    ) {
        let ttl = self.ttl;
        let row = || {
            (
                self.group.to_string(),
                partition.topic.to_string(),
                partition.partition,
                key.to_string(),
            )
        };
        let Some(after) = after else {
            if before.is_some() {
                let (g, t, p, k) = row();
                writes.push(
                    &self.statements.delete_deferred_key,
                    (timestamp, g, t, p, k),
                );
                let (g, t, p, k) = row();
                writes.push(
                    &self.statements.delete_deferred_index,
                    (timestamp, g, t, p, k),
                );
            }
            return;
        };
        let old: &[i64] = before.map_or(&[], |before| &before.offsets);
        for &offset in after.offsets.iter().filter(|offset| !old.contains(offset)) {
            let (g, t, p, k) = row();
            writes.push(
                &self.statements.insert_deferred,
                (g, t, p, k, offset, ttl, timestamp),
            );
        }
        for &offset in old.iter().filter(|offset| !after.offsets.contains(offset)) {
            let (g, t, p, k) = row();
            writes.push(
                &self.statements.delete_deferred,
                (timestamp, g, t, p, k, offset),
            );
        }
        if before.is_none_or(|before| before.failures != after.failures) {
            let failures = i32::try_from(after.failures).unwrap_or(i32::MAX);
            let (g, t, p, k) = row();
            writes.push(
                &self.statements.set_failures,
                (ttl, timestamp, failures, g, t, p, k),
            );
        }
        // Every change that leaves offsets writes the index row again, so
        // it stays whatever earlier write (one whose outcome was unknown)
        // lands late; and its TTL follows the newest offset's.
        let (g, t, p, k) = row();
        writes.push(
            &self.statements.insert_deferred_index,
            (g, t, p, k, ttl, timestamp),
        );
    }

    /// After the commit: what it wrote is known, or, if its outcome is
    /// unknown, its keys are unsure.
    pub(crate) fn settle_deferrals(
        &self,
        partition: &TopicPartition,
        changes: &[Change],
        landed: bool,
    ) {
        for change in changes {
            let Some(epoch) = change.epoch else { continue };
            if landed {
                self.known
                    .record(partition, epoch, &change.key, change.after.as_ref());
            } else {
                self.known.unsure(partition, epoch, &change.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{complete, defer, failed};
    use prosody_contracts::store::defer::{Deferral, Deferred};

    #[allow(
        clippy::unnecessary_wraps,
        reason = "the states under test are options"
    )]
    fn queue(offsets: &[i64], failures: u32) -> Option<Deferred> {
        Some(Deferred {
            offsets: offsets.to_vec(),
            failures,
        })
    }

    #[test]
    fn transitions_follow_the_contract() {
        let deferred = |state, offset, deferral| Some(defer(state, offset, deferral));
        assert_eq!(deferred(None, 5, Deferral::AfterFailure), queue(&[5], 1));
        assert_eq!(
            deferred(queue(&[5], 1), 7, Deferral::Behind),
            queue(&[5, 7], 1)
        );
        // In front of the head: a new head with its own count.
        assert_eq!(
            deferred(queue(&[5], 3), 2, Deferral::Behind),
            queue(&[2, 5], 0)
        );
        // Already queued: nothing changes.
        assert_eq!(
            deferred(queue(&[5], 3), 5, Deferral::Behind),
            queue(&[5], 3)
        );
        assert_eq!(complete(queue(&[5, 7], 2), 5), queue(&[7], 0));
        assert_eq!(complete(queue(&[5, 7], 2), 7), queue(&[5, 7], 2));
        assert_eq!(complete(queue(&[5], 2), 5), None);
        assert_eq!(complete(None, 5), None);
        assert_eq!(failed(queue(&[5], 2)), queue(&[5], 3));
        assert_eq!(failed(None), None);
    }
}
