//! The dedup tests' store: memory stores whose dedup reads a test
//! controls.

use crate::broker::TopicPartition;
use crate::store::dedup::DedupKey;
use crate::store::{Batch, StoreError, Wrapped};
use prosody_memory::MemoryStores;
use std::collections::HashSet;
use std::future::{Future, ready};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A store that remembers keys (ignoring ttls) and can be made to fail;
/// with `peeks`, it answers lookups at once too (as a store in memory).
#[derive(Clone, Default)]
pub(super) struct TestStore {
    inner: MemoryStores,
    pub(super) keys: Arc<Mutex<HashSet<DedupKey>>>,
    pub(super) fail_lookups: Arc<AtomicBool>,
    pub(super) fail_inserts: Arc<AtomicBool>,
    pub(super) lookups: Arc<AtomicUsize>,
    pub(super) peeks: bool,
}

impl TestStore {
    pub(super) fn peeking() -> Self {
        Self {
            peeks: true,
            ..Self::default()
        }
    }
}

/// Only the dedup reads answer from this store's keys; it takes no commit.
impl Wrapped for TestStore {
    type Inner = MemoryStores;

    fn inner(&self) -> &MemoryStores {
        &self.inner
    }

    fn contains(&self, key: DedupKey) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        ready(if self.fail_lookups.load(Ordering::Relaxed) {
            Err(StoreError::unavailable("lookup down"))
        } else {
            Ok(self.keys.lock().unwrap().contains(&key))
        })
    }

    fn contains_now(&self, key: DedupKey) -> Option<bool> {
        self.peeks.then(|| self.keys.lock().unwrap().contains(&key))
    }

    async fn commit(&self, _: &TopicPartition, _: Batch) -> Result<(), StoreError> {
        Err(StoreError::rejected("no commits here"))
    }

    fn commit_now(
        &self,
        _: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        Err(batch)
    }
}
