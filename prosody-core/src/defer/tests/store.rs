//! A fake defer store for the defer stage's tests.

use super::fakes::partition;
use crate::broker::TopicPartition;
use crate::key::Key;
use crate::store::StoreError;
use crate::store::defer::{DeferCounts, DeferStore, Deferral, Deferred};
use std::collections::{BTreeMap, BTreeSet};
use std::future::{Future, ready};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

type Queues = BTreeMap<(TopicPartition, Key), (BTreeSet<i64>, u32)>;

/// A defer store after the contract of `store::defer`, which can fail and
/// can answer `peek` or leave it to `deferred`.
#[derive(Clone, Default)]
pub(super) struct FakeStore {
    queues: Arc<Mutex<Queues>>,
    /// Whether `peek` answers (`Some`) or not (`None`).
    peeks: bool,
    /// Makes `defer` fail.
    pub(super) fail_defer: Arc<AtomicBool>,
    /// Makes every call fail.
    pub(super) fail_all: Arc<AtomicBool>,
}

impl FakeStore {
    pub(super) fn new(peeks: bool) -> Self {
        Self {
            peeks,
            ..Self::default()
        }
    }

    /// Queues `offsets` for `key`, as earlier deferrals would have: a fresh
    /// queue's head failed once, the others wait behind it.
    pub(super) fn put(&self, key: &str, offsets: &[i64]) {
        let mut queues = self.queues.lock().unwrap();
        let queue = queues.entry((partition(), Key::from(key))).or_default();
        if queue.0.is_empty() {
            queue.1 = 1;
        }
        queue.0.extend(offsets);
    }

    /// The key's offsets and head failure count, `None` if it has none.
    pub(super) fn queue(&self, key: &str) -> Option<(Vec<i64>, u32)> {
        let queues = self.queues.lock().unwrap();
        let (offsets, failures) = queues.get(&(partition(), Key::from(key)))?;
        Some((offsets.iter().copied().collect(), *failures))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queues.lock().unwrap().is_empty()
    }

    /// Completes the head `offset` of `key` at once (a handler's commit).
    pub(super) fn complete_now(&self, key: &Key, offset: i64) {
        let mut queues = self.queues.lock().unwrap();
        let at = (partition(), key.clone());
        if let Some((offsets, failures)) = queues.get_mut(&at)
            && offsets.first() == Some(&offset)
        {
            offsets.pop_first();
            *failures = 0;
            if offsets.is_empty() {
                queues.remove(&at);
            }
        }
    }

    /// Defers `offset`, as a commit's `DeferWrite::Defer`; fails when
    /// told to.
    pub(super) fn defer(
        &self,
        partition: &TopicPartition,
        key: &Key,
        offset: i64,
        deferral: Deferral,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        ready(self.down().and_then(|()| {
            if self.fail_defer.load(Ordering::Relaxed) {
                return Err(StoreError::unavailable("defer down"));
            }
            let mut queues = self.queues.lock().unwrap();
            let (offsets, failures) = queues.entry((partition.clone(), key.clone())).or_default();
            if offsets.insert(offset) && offsets.first() == Some(&offset) {
                *failures = deferral.failures();
            }
            Ok(())
        }))
    }

    /// Completes `offset`, as a commit's `DeferWrite::Complete`.
    pub(super) fn complete(
        &self,
        partition: &TopicPartition,
        key: &Key,
        offset: i64,
    ) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send {
        ready(self.down().map(|()| {
            let mut queues = self.queues.lock().unwrap();
            let at = (partition.clone(), key.clone());
            let (offsets, failures) = queues.get_mut(&at)?;
            if offsets.first() != Some(&offset) {
                return offsets.first().copied();
            }
            offsets.pop_first();
            *failures = 0;
            let next = offsets.first().copied();
            if next.is_none() {
                queues.remove(&at);
            }
            next
        }))
    }

    /// Counts a failure, as a commit's `DeferWrite::Failed`.
    pub(super) fn failed(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> impl Future<Output = Result<u32, StoreError>> + Send {
        ready(self.down().map(|()| {
            let mut queues = self.queues.lock().unwrap();
            queues
                .get_mut(&(partition.clone(), key.clone()))
                .map_or(0, |(_, failures)| {
                    *failures = failures.saturating_add(1);
                    *failures
                })
        }))
    }

    pub(super) fn len(&self) -> usize {
        self.queues.lock().unwrap().len()
    }

    fn down(&self) -> Result<(), StoreError> {
        if self.fail_all.load(Ordering::Relaxed) {
            return Err(StoreError::unavailable("store down"));
        }
        Ok(())
    }
}

impl DeferStore for FakeStore {
    fn counts(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<DeferCounts, StoreError>> + Send {
        ready(self.down().map(|()| {
            let queues = self.queues.lock().unwrap();
            queues
                .iter()
                .filter(|((tp, _), _)| tp == partition)
                .fold(DeferCounts::default(), |counts, (_, (offsets, _))| {
                    counts.changed(0, offsets.len())
                })
        }))
    }

    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        let at = (partition.clone(), key.clone());
        self.peeks
            .then(|| self.queues.lock().unwrap().contains_key(&at))
    }

    fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Deferred>, StoreError>> + Send {
        ready(self.down().map(|()| {
            let queues = self.queues.lock().unwrap();
            let (offsets, failures) = queues.get(&(partition.clone(), key.clone()))?;
            Some(Deferred {
                offsets: offsets.iter().copied().collect(),
                failures: *failures,
            })
        }))
    }
}
