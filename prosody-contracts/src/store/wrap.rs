//! Store decorators forward what they do not change: [`Wrapped`] holds a
//! default for each call of the contract that hands it to the inner
//! stores, and every wrapper is the contract's five traits through one
//! blanket implementation of each.

use super::{
    Batch, DedupKey, DedupStore, DeferCounts, DeferStore, Deferred, Direction, ItemRange,
    StateStore, StoreError, Stores, TimerEntry, TimerKind, TimerStore,
};
use crate::broker::TopicPartition;
use crate::clock::Timestamp;
use crate::key::Key;
use bytes::Bytes;
use std::future::Future;

/// Stores around inner ones (a cache, a meter, a fault injector): each
/// call of the store contract, forwarded unchanged unless the wrapper
/// overrides it.
///
/// Invariant: a wrapper answers every call its inner stores answer,
/// including the ones that answer at once without I/O (`peek`,
/// `counts_now`, `contains_now`, `commit_now`): forwarding is the default,
/// so a wrapper that overrides nothing keeps its inner stores' fast paths.
/// A wrapper is [`Stores`] through the blanket implementations below, and
/// implements none of the store traits itself. A wrapper that changes a
/// waiting call changes its answer given at once too, or declines it
/// (`commit_now` giving the batch back, `contains_now` answering `None`),
/// so that the waiting call sees everything.
///
/// ```
/// use prosody_contracts::broker::TopicPartition;
/// use prosody_contracts::store::{Batch, StoreError, Stores, Wrapped};
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// /// Counts commits, and changes nothing else.
/// #[derive(Clone)]
/// struct Counted<S> {
///     inner: S,
///     commits: Arc<AtomicUsize>,
/// }
///
/// impl<S: Stores> Wrapped for Counted<S> {
///     type Inner = S;
///
///     fn inner(&self) -> &S {
///         &self.inner
///     }
///
///     async fn commit(&self, partition: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
///         self.commits.fetch_add(1, Ordering::Relaxed);
///         self.inner.commit(partition, batch).await
///     }
///
///     // Counted too: what the inner stores write at once is a commit.
///     fn commit_now(
///         &self,
///         partition: &TopicPartition,
///         batch: Batch,
///     ) -> Result<Result<(), StoreError>, Batch> {
///         let written = self.inner.commit_now(partition, batch);
///         if written.is_ok() {
///             self.commits.fetch_add(1, Ordering::Relaxed);
///         }
///         written
///     }
/// }
/// ```
pub trait Wrapped: Clone + Send + Sync + 'static {
    /// The stores wrapped.
    type Inner: Stores;

    /// The stores wrapped.
    fn inner(&self) -> &Self::Inner;

    /// [`TimerStore::scheduled`](super::TimerStore::scheduled).
    fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> impl Future<Output = Result<Vec<Timestamp>, StoreError>> + Send {
        self.inner().scheduled(partition, key, kind)
    }

    /// [`TimerStore::load`](super::TimerStore::load).
    fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> impl Future<Output = Result<Vec<TimerEntry>, StoreError>> + Send {
        self.inner().load(partition, from, until)
    }

    /// [`DeferStore::peek`](super::DeferStore::peek).
    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        self.inner().peek(partition, key)
    }

    /// [`DeferStore::counts`](super::DeferStore::counts).
    fn counts(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<DeferCounts, StoreError>> + Send {
        self.inner().counts(partition)
    }

    /// [`DeferStore::counts_now`](super::DeferStore::counts_now).
    fn counts_now(&self, partition: &TopicPartition) -> Option<DeferCounts> {
        self.inner().counts_now(partition)
    }

    /// [`DeferStore::deferred`](super::DeferStore::deferred).
    fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Deferred>, StoreError>> + Send {
        self.inner().deferred(partition, key)
    }

    /// [`DedupStore::contains`](super::DedupStore::contains).
    fn contains(&self, key: DedupKey) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.inner().contains(key)
    }

    /// [`DedupStore::contains_now`](super::DedupStore::contains_now).
    fn contains_now(&self, key: DedupKey) -> Option<bool> {
        self.inner().contains_now(key)
    }

    /// [`StateStore::identify`](super::StateStore::identify).
    fn identify(
        &self,
        name: &str,
        identity: &str,
    ) -> impl Future<Output = Result<String, StoreError>> + Send {
        self.inner().identify(name, identity)
    }

    /// [`StateStore::cell`](super::StateStore::cell).
    fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> impl Future<Output = Result<Option<Bytes>, StoreError>> + Send {
        self.inner().cell(partition, collection, key, item)
    }

    /// [`StateStore::cells`](super::StateStore::cells).
    fn cells(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        range: &ItemRange,
        direction: Direction,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Bytes, Bytes)>, StoreError>> + Send {
        self.inner()
            .cells(partition, collection, key, range, direction, limit)
    }

    /// [`Stores::durable`].
    fn durable(&self) -> bool {
        self.inner().durable()
    }

    /// [`Stores::open`].
    fn open(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner().open(partition)
    }

    /// [`Stores::close`].
    fn close(&self, partition: &TopicPartition) {
        self.inner().close(partition);
    }

    /// [`Stores::commit`].
    fn commit(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner().commit(partition, batch)
    }

    /// [`Stores::commit_now`].
    ///
    /// # Errors
    ///
    /// As [`Stores::commit_now`].
    fn commit_now(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        self.inner().commit_now(partition, batch)
    }
}

impl<W: Wrapped> TimerStore for W {
    fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> impl Future<Output = Result<Vec<Timestamp>, StoreError>> + Send {
        Wrapped::scheduled(self, partition, key, kind)
    }

    fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> impl Future<Output = Result<Vec<TimerEntry>, StoreError>> + Send {
        Wrapped::load(self, partition, from, until)
    }
}

impl<W: Wrapped> DeferStore for W {
    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        Wrapped::peek(self, partition, key)
    }

    fn counts(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<DeferCounts, StoreError>> + Send {
        Wrapped::counts(self, partition)
    }

    fn counts_now(&self, partition: &TopicPartition) -> Option<DeferCounts> {
        Wrapped::counts_now(self, partition)
    }

    fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Deferred>, StoreError>> + Send {
        Wrapped::deferred(self, partition, key)
    }
}

impl<W: Wrapped> DedupStore for W {
    fn contains(&self, key: DedupKey) -> impl Future<Output = Result<bool, StoreError>> + Send {
        Wrapped::contains(self, key)
    }

    fn contains_now(&self, key: DedupKey) -> Option<bool> {
        Wrapped::contains_now(self, key)
    }
}

impl<W: Wrapped> StateStore for W {
    fn identify(
        &self,
        name: &str,
        identity: &str,
    ) -> impl Future<Output = Result<String, StoreError>> + Send {
        Wrapped::identify(self, name, identity)
    }

    fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> impl Future<Output = Result<Option<Bytes>, StoreError>> + Send {
        Wrapped::cell(self, partition, collection, key, item)
    }

    fn cells(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        range: &ItemRange,
        direction: Direction,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Bytes, Bytes)>, StoreError>> + Send {
        Wrapped::cells(self, partition, collection, key, range, direction, limit)
    }
}

impl<W: Wrapped> Stores for W {
    fn durable(&self) -> bool {
        Wrapped::durable(self)
    }

    fn open(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        Wrapped::open(self, partition)
    }

    fn close(&self, partition: &TopicPartition) {
        Wrapped::close(self, partition);
    }

    fn commit(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        Wrapped::commit(self, partition, batch)
    }

    fn commit_now(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        Wrapped::commit_now(self, partition, batch)
    }
}
