//! The txns an owner knows to be undecided, with the keys they touch.

use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

#[derive(Debug, Default)]
struct Txns {
    of: HashMap<TopicPartition, BTreeMap<i64, BTreeSet<String>>>,
    /// Partitions closed and not opened since: nothing is added for them.
    closed: HashSet<TopicPartition>,
}

/// The txns of this client's partitions that are not resolved yet (a
/// commit that failed midway, or one an earlier owner left whose commit
/// point may still land), each with the keys it changes.
///
/// Invariant: a read of a key waits for every txn here that changes it;
/// a closed partition has none (its next owner resolves them).
#[derive(Debug, Default)]
pub(crate) struct Unresolved {
    /// How many there are in all: reads check it before taking the lock.
    count: AtomicUsize,
    txns: Mutex<Txns>,
}

impl Unresolved {
    fn lock(&self) -> MutexGuard<'_, Txns> {
        self.txns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records an undecided txn, unless its partition was closed.
    pub(super) fn add(&self, partition: &TopicPartition, txn: i64, keys: BTreeSet<String>) {
        let mut txns = self.lock();
        if txns.closed.contains(partition) {
            return;
        }
        if txns
            .of
            .entry(partition.clone())
            .or_default()
            .insert(txn, keys)
            .is_none()
        {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(super) fn remove(&self, partition: &TopicPartition, txn: i64) {
        let mut txns = self.lock();
        if let Some(of) = txns.of.get_mut(partition)
            && of.remove(&txn).is_some()
        {
            self.count.fetch_sub(1, Ordering::Relaxed);
            if of.is_empty() {
                txns.of.remove(partition);
            }
        }
    }

    /// The partition's txns that change `key` (all of them for `None`).
    pub(super) fn touching(&self, partition: &TopicPartition, key: Option<&Key>) -> Vec<i64> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        self.lock().of.get(partition).map_or_else(Vec::new, |of| {
            of.iter()
                .filter(|(_, keys)| key.is_none_or(|key| keys.contains(&**key)))
                .map(|(txn, _)| *txn)
                .collect()
        })
    }

    /// The partition is this client's again.
    pub(super) fn open(&self, partition: &TopicPartition) {
        self.lock().closed.remove(partition);
    }

    /// The partition went to another owner, who resolves them at `open`.
    pub(crate) fn close(&self, partition: &TopicPartition) {
        let mut txns = self.lock();
        txns.closed.insert(partition.clone());
        if let Some(of) = txns.of.remove(partition) {
            self.count.fetch_sub(of.len(), Ordering::Relaxed);
        }
    }
}
