//! A store wrapper that counts the round trips the client asks of its
//! stores: the reads that may wait (but `identify` and `counts`), and the
//! commits that write something.

use bytes::Bytes;
use prosody::broker::TopicPartition;
use prosody::store::{
    Batch, DedupKey, Deferred, Direction, ItemRange, StoreError, Stores, TimerEntry, TimerKind,
    Wrapped,
};
use prosody::{Key, Timestamp};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

tokio::task_local! {
    /// The state reads of the call being timed: a task that sets it
    /// learns whether a `get` reached the store (a cache miss).
    pub static READS: std::cell::Cell<u32>;
}

/// `inner`, counting the calls that could reach its backend.
#[derive(Clone)]
pub struct Counting<S> {
    pub inner: S,
    pub calls: Arc<AtomicU64>,
}

impl<S> Counting<S> {
    fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

impl<S: Stores> Wrapped for Counting<S> {
    type Inner = S;

    fn inner(&self) -> &S {
        &self.inner
    }

    async fn commit(&self, partition: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        if !batch.is_empty() {
            self.count();
        }
        self.inner.commit(partition, batch).await
    }

    fn commit_now(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        let written = !batch.is_empty();
        let now = self.inner.commit_now(partition, batch);
        if written && now.is_ok() {
            self.count();
        }
        now
    }

    async fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> Result<Vec<Timestamp>, StoreError> {
        self.count();
        self.inner.scheduled(partition, key, kind).await
    }

    async fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> Result<Vec<TimerEntry>, StoreError> {
        self.count();
        self.inner.load(partition, from, until).await
    }

    async fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        self.count();
        self.inner.deferred(partition, key).await
    }

    async fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> Result<Option<Bytes>, StoreError> {
        self.count();
        // Outside a timed call there is nothing to tell.
        let _ = READS.try_with(|reads| reads.set(reads.get() + 1));
        self.inner.cell(partition, collection, key, item).await
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
        self.count();
        self.inner
            .cells(partition, collection, key, range, direction, limit)
            .await
    }

    async fn contains(&self, key: DedupKey) -> Result<bool, StoreError> {
        self.count();
        self.inner.contains(key).await
    }
}
