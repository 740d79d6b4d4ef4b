//! The caching store decorator: each partition's owner answers reads of
//! its keys' state cells from what its own commits wrote, in memory and,
//! when the client has one, in a fjall disk tier.

mod disk;
mod owner;

pub use disk::{CacheError, StateCache};

use bytes::Bytes;
use owner::{OwnerCache, Seen};
use prosody_core::broker::TopicPartition;
use prosody_core::key::Key;
use prosody_core::store::{Batch, StateWrite, StoreError, Stores, Wrapped};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::time::Instant;

/// Stores whose point reads of state cells ([`StateStore::cell`](prosody_core::store::StateStore::cell)) a
/// partition's owner answers from its cache; every other call goes to the
/// inner stores unchanged.
///
/// Invariant: a cached answer equals what the inner store holds, because
/// the owner is the only writer of its partition while it owns it and
/// every one of its commits passes here. [`open`](Stores::open) starts an
/// empty cache for the partition (with a fresh disk keyspace when a
/// [`StateCache`] is given), [`close`](Stores::close) drops it (and
/// deletes the keyspace), so a partition taken again starts empty. A
/// commit that lands updates the cells it wrote; one that fails or is
/// dropped midway forgets them and keeps no absence for them after. A
/// value read from the store is not kept; an absence is, unless a commit
/// settled while it was read. A cell near its expiry is left to the store.
/// Holds one cache per open partition (at most 4096 cells each in memory).
#[derive(Clone)]
pub struct CachedStores<S> {
    inner: S,
    shared: Arc<Shared>,
}

struct Shared {
    disk: Option<Arc<StateCache>>,
    partitions: Mutex<HashMap<TopicPartition, Arc<OwnerCache>>>,
    lookups: CacheLookups,
}

/// How often a cell read was answered by the cache (a hit) or went to the
/// store (a miss); clones share the counts, which only grow.
#[derive(Clone, Debug, Default)]
pub struct CacheLookups(Arc<[AtomicU64; 2]>);

impl CacheLookups {
    /// Reads the cache answered.
    #[must_use]
    pub fn hits(&self) -> u64 {
        self.0[0].load(Ordering::Relaxed)
    }

    /// Reads that went to the store.
    #[must_use]
    pub fn misses(&self) -> u64 {
        self.0[1].load(Ordering::Relaxed)
    }

    pub(crate) fn count(&self, hit: bool) {
        self.0[usize::from(!hit)].fetch_add(1, Ordering::Relaxed);
    }
}

impl<S> std::fmt::Debug for CachedStores<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedStores")
            .field("disk", &self.shared.disk)
            .finish_non_exhaustive()
    }
}

impl<S: Stores> CachedStores<S> {
    /// `inner`, with a cache per open partition, backed by `disk` if given.
    pub fn new(inner: S, disk: Option<Arc<StateCache>>) -> Self {
        Self {
            inner,
            shared: Arc::new(Shared {
                disk,
                partitions: Mutex::new(HashMap::new()),
                lookups: CacheLookups::default(),
            }),
        }
    }

    /// The counts of its cell reads: answered by the cache, or not.
    #[must_use]
    pub fn lookups(&self) -> CacheLookups {
        self.shared.lookups.clone()
    }

    fn partitions(&self) -> MutexGuard<'_, HashMap<TopicPartition, Arc<OwnerCache>>> {
        // Nothing panics while holding it: a poisoned map is consistent.
        self.shared
            .partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The cache of `partition`, if it is open.
    fn cache(&self, partition: &TopicPartition) -> Option<Arc<OwnerCache>> {
        self.partitions().get(partition).map(Arc::clone)
    }

    /// A fresh disk tier for a partition's cache, if the client has a disk
    /// cache; one that fails to open leaves the cache in memory.
    fn disk_tier(&self, partition: &TopicPartition) -> Option<disk::DiskTier> {
        let cache = self.shared.disk.as_ref()?;
        cache
            .partition()
            .inspect_err(|error| {
                tracing::warn!(%partition, %error, "the state disk cache failed to open; the partition caches in memory");
            })
            .ok()
    }
}

/// A commit's state writes whose outcome is not known yet: dropped with
/// writes left, it makes the cache forget their cells.
struct Unsure<'a> {
    cache: &'a OwnerCache,
    writes: Vec<StateWrite>,
}

impl Drop for Unsure<'_> {
    fn drop(&mut self) {
        if !self.writes.is_empty() {
            self.cache.forget(&self.writes);
        }
    }
}

impl<S: Stores> Wrapped for CachedStores<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    /// From the partition's cache when it knows the cell; else from the
    /// inner store, keeping an absence found there.
    async fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> Result<Option<Bytes>, StoreError> {
        let Some(cache) = self.cache(partition) else {
            return self.inner.cell(partition, collection, key, item).await;
        };
        if let Seen::Known(known) = cache.get(collection, key, item) {
            self.shared.lookups.count(true);
            return Ok(known);
        }
        self.shared.lookups.count(false);
        let generation = cache.generation();
        let stored = self.inner.cell(partition, collection, key, item).await?;
        if stored.is_none() {
            cache.absent(collection, key, item, generation);
        }
        Ok(stored)
    }

    /// Opens the inner stores' partition, then starts its empty cache.
    async fn open(&self, partition: &TopicPartition) -> Result<(), StoreError> {
        self.inner.open(partition).await?;
        let cache = Arc::new(OwnerCache::new(self.disk_tier(partition)));
        self.partitions().insert(partition.clone(), cache);
        Ok(())
    }

    /// Drops the partition's cache, then closes the inner stores'.
    fn close(&self, partition: &TopicPartition) {
        self.partitions().remove(partition);
        self.inner.close(partition);
    }

    /// Writes through the inner stores; the partition's cache then takes
    /// the state writes if the commit returned `Ok`, and forgets them if it
    /// failed or was dropped midway.
    async fn commit(&self, partition: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        let cache = if batch.state.is_empty() {
            None
        } else {
            self.cache(partition)
        };
        let Some(cache) = cache else {
            return self.inner.commit(partition, batch).await;
        };
        let mut unsure = Unsure {
            cache: &cache,
            writes: batch.state.clone(),
        };
        // When the cells' ttls count from.
        let sent = Instant::now();
        self.inner.commit(partition, batch).await?;
        cache.landed(&std::mem::take(&mut unsure.writes), sent);
        Ok(())
    }

    /// The inner stores' own, for a batch that touches no cached cell;
    /// any other goes to [`commit`](Stores::commit).
    fn commit_now(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        if !batch.state.is_empty() && self.cache(partition).is_some() {
            return Err(batch);
        }
        self.inner.commit_now(partition, batch)
    }
}

#[cfg(test)]
mod tests;
