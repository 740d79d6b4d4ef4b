//! A store wrapper that counts the round trips the client asks of its
//! stores: every call but `peek`, `open` and `close`, and only the commits
//! that write something.

use bytes::Bytes;
use prosody::broker::TopicPartition;
use prosody::store::{
    Batch, DedupKey, DedupStore, DeferCounts, DeferStore, Deferred, Direction, ItemRange,
    StateStore, StoreError, Stores, TimerEntry, TimerKind, TimerStore,
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

impl<S: Stores> Stores for Counting<S> {
    fn durable(&self) -> bool {
        self.inner.durable()
    }

    async fn open(&self, partition: &TopicPartition) -> Result<(), StoreError> {
        self.inner.open(partition).await
    }

    fn close(&self, partition: &TopicPartition) {
        self.inner.close(partition);
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
}

impl<S: Stores> TimerStore for Counting<S> {
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
}

impl<S: Stores> DeferStore for Counting<S> {
    async fn counts(&self, partition: &TopicPartition) -> Result<DeferCounts, StoreError> {
        self.inner.counts(partition).await
    }

    fn counts_now(&self, partition: &TopicPartition) -> Option<DeferCounts> {
        self.inner.counts_now(partition)
    }

    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        self.inner.peek(partition, key)
    }

    async fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        self.count();
        DeferStore::deferred(&self.inner, partition, key).await
    }
}

impl<S: Stores> StateStore for Counting<S> {
    async fn identify(&self, name: &str, identity: &str) -> Result<String, StoreError> {
        self.inner.identify(name, identity).await
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
}

impl<S: Stores> DedupStore for Counting<S> {
    async fn contains(&self, key: DedupKey) -> Result<bool, StoreError> {
        self.count();
        self.inner.contains(key).await
    }

    /// Not counted: it answers only without reaching the backend.
    fn contains_now(&self, key: DedupKey) -> Option<bool> {
        self.inner.contains_now(key)
    }
}
