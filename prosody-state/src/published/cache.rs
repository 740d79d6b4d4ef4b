//! The readers' cache of another group's cells: it bounds how stale a read
//! may be and how often the store is asked.

use crate::cache::CacheLookups;
use bytes::Bytes;
use prosody_core::broker::TopicPartition;
use prosody_core::key::Key;
use prosody_core::store::{Direction, ItemRange, StoreError, Stores, Wrapped};
use quick_cache::Weighter;
use quick_cache::sync::Cache;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What a read asked: one cell, or a page of cells.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Asked {
    Cell {
        partition: TopicPartition,
        collection: Arc<str>,
        key: Key,
        item: Bytes,
    },
    Page {
        partition: TopicPartition,
        collection: Arc<str>,
        key: Key,
        range: ItemRange,
        forward: bool,
        limit: usize,
    },
}

/// What the store answered, and until when it may be served.
#[derive(Clone, Debug)]
struct Answer {
    until: Instant,
    cells: Arc<[(Bytes, Bytes)]>,
}

/// Weighs an entry by its bytes (keys, items and values), plus a fixed
/// part for its bookkeeping.
#[derive(Clone, Copy, Debug)]
struct Bytewise;

impl Weighter<Asked, Answer> for Bytewise {
    fn weight(&self, asked: &Asked, answer: &Answer) -> u64 {
        let asked = match asked {
            Asked::Cell { key, item, .. } => key.len() + item.len(),
            Asked::Page { key, range, .. } => {
                key.len() + range.from.len() + range.until.as_ref().map_or(0, Bytes::len)
            }
        };
        let answer: usize = answer.cells.iter().map(|(i, v)| i.len() + v.len()).sum();
        u64::try_from(128 + asked + answer).unwrap_or(u64::MAX)
    }
}

/// Stores whose cell reads are served from a cache for `ttl` after
/// the store answered them; identities pass through.
///
/// Invariant: an answer is served at most `ttl` after the store gave it
/// (a zero `ttl` bypasses the cache), so a read is never staler than that;
/// the cache holds about `capacity` bytes (the least recently used go
/// first), shared by every reader of one client. Each read through the
/// cache counts once in its [`lookups`](SharedReads::lookups): a hit when
/// the cache answered, a miss when the store did (with a zero `ttl`, none).
#[derive(Clone)]
pub struct CachedReads<S> {
    inner: S,
    cache: Arc<Cache<Asked, Answer, Bytewise>>,
    lookups: CacheLookups,
    ttl: Duration,
}

impl<S> std::fmt::Debug for CachedReads<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedReads")
            .field("ttl", &self.ttl)
            .field("weight", &self.cache.weight())
            .finish_non_exhaustive()
    }
}

/// The cache readers of one client share, of about `capacity` bytes, and
/// its hits and misses.
#[derive(Clone)]
pub struct SharedReads {
    cache: Arc<Cache<Asked, Answer, Bytewise>>,
    lookups: CacheLookups,
}

impl std::fmt::Debug for SharedReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReads")
            .field("weight", &self.cache.weight())
            .field("lookups", &self.lookups)
            .finish()
    }
}

impl SharedReads {
    /// A cache of about `capacity` bytes.
    #[must_use]
    pub fn new(capacity: u64) -> Self {
        // About one entry per KiB, for the cache's sizing.
        let items = usize::try_from(capacity / 1024)
            .unwrap_or(usize::MAX)
            .max(16);
        Self {
            cache: Arc::new(Cache::with_weighter(items, capacity.max(1), Bytewise)),
            lookups: CacheLookups::default(),
        }
    }

    /// How often its readers' reads were answered by the cache (hits) or
    /// went to the store (misses); the counts only grow.
    #[must_use]
    pub fn lookups(&self) -> &CacheLookups {
        &self.lookups
    }
}

impl<S> CachedReads<S> {
    /// `inner`'s reads through `shared`, each served for `ttl`.
    #[must_use]
    pub fn new(inner: S, shared: &SharedReads, ttl: Duration) -> Self {
        Self {
            inner,
            cache: Arc::clone(&shared.cache),
            lookups: shared.lookups.clone(),
            ttl,
        }
    }

    /// The cached answer to `asked` if still fresh, counted as a hit or a
    /// miss.
    fn fresh(&self, asked: &Asked) -> Option<Arc<[(Bytes, Bytes)]>> {
        let fresh = self
            .cache
            .get(asked)
            .filter(|answer| Instant::now() < answer.until)
            .map(|answer| answer.cells);
        self.lookups.count(fresh.is_some());
        fresh
    }

    fn keep(&self, asked: Asked, cells: Arc<[(Bytes, Bytes)]>) {
        let until = Instant::now() + self.ttl;
        self.cache.insert(asked, Answer { until, cells });
    }
}

impl<S: Stores> Wrapped for CachedReads<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    async fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> Result<Option<Bytes>, StoreError> {
        if self.ttl.is_zero() {
            return self.inner.cell(partition, collection, key, item).await;
        }
        let asked = Asked::Cell {
            partition: partition.clone(),
            collection: Arc::from(collection),
            key: key.clone(),
            item: Bytes::copy_from_slice(item),
        };
        if let Some(cells) = self.fresh(&asked) {
            return Ok(cells.first().map(|(_, value)| value.clone()));
        }
        let value = self.inner.cell(partition, collection, key, item).await?;
        let cells: Arc<[(Bytes, Bytes)]> = match &value {
            Some(value) => Arc::from([(Bytes::new(), value.clone())]),
            None => Arc::from([]),
        };
        self.keep(asked, cells);
        Ok(value)
    }

    async fn cells(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        range: &ItemRange,
        direction: Direction,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        if self.ttl.is_zero() {
            return self
                .inner
                .cells(partition, collection, key, range, direction, limit)
                .await;
        }
        let asked = Asked::Page {
            partition: partition.clone(),
            collection: Arc::from(collection),
            key: key.clone(),
            range: range.clone(),
            forward: direction == Direction::Forward,
            limit,
        };
        if let Some(cells) = self.fresh(&asked) {
            return Ok(cells.to_vec());
        }
        let cells = self
            .inner
            .cells(partition, collection, key, range, direction, limit)
            .await?;
        self.keep(asked, Arc::from(cells.as_slice()));
        Ok(cells)
    }
}
