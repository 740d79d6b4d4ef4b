//! Reading a record back by its offset, for the defer stage's retries.
//!
//! A deferred message is settled and committed past, so when its retry
//! comes the defer stage reads it again from the log. [`BrokerLoader`] does
//! that through any [`Broker`], with a bounded cache (a head that keeps
//! failing is read once, not once per retry) and a deadline per read.

use crate::broker::{Broker, BrokerError, Record, TopicPartition};
use crate::hash::{BoundedCache, recent};
use std::fmt;
use std::future::Future;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

/// A record that could not be read back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The read did not finish within the seek timeout.
    #[error("reading offset {offset} of {partition} timed out after {timeout:?}")]
    Timeout {
        /// The partition read.
        partition: TopicPartition,
        /// The offset read.
        offset: i64,
        /// The seek timeout that ran out.
        timeout: Duration,
    },
    /// The broker failed the read.
    #[error("reading offset {offset} of {partition} failed: {source}")]
    Broker {
        /// The partition read.
        partition: TopicPartition,
        /// The offset read.
        offset: i64,
        /// The broker's error.
        #[source]
        source: BrokerError,
    },
}

/// Reads one record of a partition at an exact offset.
///
/// Contract: `Ok(None)` means the log holds no record there (removed by
/// retention or compaction): asking again will not find it. An error may
/// succeed if asked again.
pub trait Loader: Clone + Send + Sync + 'static {
    /// The record at `offset` of `partition`, if the log still holds it.
    fn load(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> impl Future<Output = Result<Option<Record>, LoadError>> + Send;
}

/// How records are read back (the seeds' "Kafka message loader" options).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoaderConfig {
    /// Records kept in memory, shared by every partition
    /// (`loader_cache_size`, default 1024).
    pub cache_size: NonZeroUsize,
    /// How long one read may take (`loader_seek_timeout`, default 30s).
    pub seek_timeout: Duration,
    /// How far a backend that reads a partition sequentially may skip
    /// forward instead of seeking again (`loader_discard_threshold`, default
    /// 100 records). The Kafka backend applies it; the in-memory broker
    /// reads by index and has no use for it.
    pub discard_threshold: usize,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        Self {
            cache_size: NonZeroUsize::new(1024).unwrap_or(NonZeroUsize::MIN),
            seek_timeout: Duration::from_secs(30),
            discard_threshold: 100,
        }
    }
}

/// A [`Loader`] over a broker's [`Broker::read`].
///
/// Invariant: the cache holds about `cache_size` records (each of its
/// shards at most its share, rounded up), each exactly as the broker
/// returned it for its (partition, offset); records are immutable once
/// written, so a cached record never goes stale. Removal path: the oldest
/// record leaves first. Absent records are not cached.
pub struct BrokerLoader<B> {
    broker: B,
    cache: Arc<BoundedCache<(TopicPartition, i64), Record>>,
    seek_timeout: Duration,
}

impl<B> BrokerLoader<B> {
    /// A loader reading through `broker`.
    #[must_use]
    pub fn new(broker: B, config: &LoaderConfig) -> Self {
        Self {
            broker,
            cache: Arc::new(recent(config.cache_size)),
            seek_timeout: config.seek_timeout,
        }
    }
}

impl<B: Clone> Clone for BrokerLoader<B> {
    fn clone(&self) -> Self {
        Self {
            broker: self.broker.clone(),
            cache: Arc::clone(&self.cache),
            seek_timeout: self.seek_timeout,
        }
    }
}

impl<B> fmt::Debug for BrokerLoader<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerLoader")
            .field("seek_timeout", &self.seek_timeout)
            .finish_non_exhaustive()
    }
}

impl<B: Broker> Loader for BrokerLoader<B> {
    async fn load(
        &self,
        partition: &TopicPartition,
        offset: i64,
    ) -> Result<Option<Record>, LoadError> {
        let at = (partition.clone(), offset);
        if let Some(record) = self.cache.get(&at) {
            return Ok(Some(record));
        }
        let read = self.broker.read(partition, offset);
        let record = match tokio::time::timeout(self.seek_timeout, read).await {
            Ok(Ok(record)) => record,
            Ok(Err(source)) => {
                return Err(LoadError::Broker {
                    partition: partition.clone(),
                    offset,
                    source,
                });
            }
            Err(_) => {
                return Err(LoadError::Timeout {
                    partition: partition.clone(),
                    offset,
                    timeout: self.seek_timeout,
                });
            }
        };
        if let Some(record) = &record {
            self.cache.insert(at, record.clone());
        }
        Ok(record)
    }
}
