//! Any stores behind one pointer: [`AnyStores`], the one erased type of
//! the store contract, so no signature above the backends names one.

use super::{
    Batch, DedupKey, DedupStore, DeferCounts, DeferStore, Deferred, Direction, ItemRange,
    StateStore, StoreError, Stores, TimerEntry, TimerKind, TimerStore,
};
use crate::broker::TopicPartition;
use crate::clock::Timestamp;
use crate::key::Key;
use bytes::Bytes;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// [`Stores`], dyn-compatible: every call, each one required, so the
/// answers given at once (`peek`, `counts_now`, `contains_now`,
/// `commit_now`) pass the pointer as the waiting ones do.
trait DynStores: Send + Sync {
    fn scheduled<'a>(
        &'a self,
        partition: &'a TopicPartition,
        key: &'a Key,
        kind: TimerKind,
    ) -> Call<'a, Vec<Timestamp>>;
    fn load<'a>(
        &'a self,
        partition: &'a TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> Call<'a, Vec<TimerEntry>>;
    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool>;
    fn counts<'a>(&'a self, partition: &'a TopicPartition) -> Call<'a, DeferCounts>;
    fn counts_now(&self, partition: &TopicPartition) -> Option<DeferCounts>;
    fn deferred<'a>(
        &'a self,
        partition: &'a TopicPartition,
        key: &'a Key,
    ) -> Call<'a, Option<Deferred>>;
    fn contains(&self, key: DedupKey) -> Call<'_, bool>;
    fn contains_now(&self, key: DedupKey) -> Option<bool>;
    fn identify<'a>(&'a self, name: &'a str, identity: &'a str) -> Call<'a, String>;
    fn cell<'a>(
        &'a self,
        partition: &'a TopicPartition,
        collection: &'a str,
        key: &'a Key,
        item: &'a [u8],
    ) -> Call<'a, Option<Bytes>>;
    #[allow(clippy::too_many_arguments, reason = "the contract's arguments")]
    fn cells<'a>(
        &'a self,
        partition: &'a TopicPartition,
        collection: &'a str,
        key: &'a Key,
        range: &'a ItemRange,
        direction: Direction,
        limit: usize,
    ) -> Call<'a, Vec<(Bytes, Bytes)>>;
    fn durable(&self) -> bool;
    fn open<'a>(&'a self, partition: &'a TopicPartition) -> Call<'a, ()>;
    fn close(&self, partition: &TopicPartition);
    fn commit<'a>(&'a self, partition: &'a TopicPartition, batch: Batch) -> Call<'a, ()>;
    fn commit_now(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch>;
}

impl<S: Stores> DynStores for S {
    fn scheduled<'a>(
        &'a self,
        partition: &'a TopicPartition,
        key: &'a Key,
        kind: TimerKind,
    ) -> Call<'a, Vec<Timestamp>> {
        Box::pin(TimerStore::scheduled(self, partition, key, kind))
    }

    fn load<'a>(
        &'a self,
        partition: &'a TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> Call<'a, Vec<TimerEntry>> {
        Box::pin(TimerStore::load(self, partition, from, until))
    }

    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        DeferStore::peek(self, partition, key)
    }

    fn counts<'a>(&'a self, partition: &'a TopicPartition) -> Call<'a, DeferCounts> {
        Box::pin(DeferStore::counts(self, partition))
    }

    fn counts_now(&self, partition: &TopicPartition) -> Option<DeferCounts> {
        DeferStore::counts_now(self, partition)
    }

    fn deferred<'a>(
        &'a self,
        partition: &'a TopicPartition,
        key: &'a Key,
    ) -> Call<'a, Option<Deferred>> {
        Box::pin(DeferStore::deferred(self, partition, key))
    }

    fn contains(&self, key: DedupKey) -> Call<'_, bool> {
        Box::pin(DedupStore::contains(self, key))
    }

    fn contains_now(&self, key: DedupKey) -> Option<bool> {
        DedupStore::contains_now(self, key)
    }

    fn identify<'a>(&'a self, name: &'a str, identity: &'a str) -> Call<'a, String> {
        Box::pin(StateStore::identify(self, name, identity))
    }

    fn cell<'a>(
        &'a self,
        partition: &'a TopicPartition,
        collection: &'a str,
        key: &'a Key,
        item: &'a [u8],
    ) -> Call<'a, Option<Bytes>> {
        Box::pin(StateStore::cell(self, partition, collection, key, item))
    }

    fn cells<'a>(
        &'a self,
        partition: &'a TopicPartition,
        collection: &'a str,
        key: &'a Key,
        range: &'a ItemRange,
        direction: Direction,
        limit: usize,
    ) -> Call<'a, Vec<(Bytes, Bytes)>> {
        Box::pin(StateStore::cells(
            self, partition, collection, key, range, direction, limit,
        ))
    }

    fn durable(&self) -> bool {
        Stores::durable(self)
    }

    fn open<'a>(&'a self, partition: &'a TopicPartition) -> Call<'a, ()> {
        Box::pin(Stores::open(self, partition))
    }

    fn close(&self, partition: &TopicPartition) {
        Stores::close(self, partition);
    }

    fn commit<'a>(&'a self, partition: &'a TopicPartition, batch: Batch) -> Call<'a, ()> {
        Box::pin(Stores::commit(self, partition, batch))
    }

    fn commit_now(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        Stores::commit_now(self, partition, batch)
    }
}

/// Stores of any backend, with any wrappers, behind one pointer; clones
/// share them.
///
/// Invariant: stores are erased once. [`Stores::erase`] of an `AnyStores`
/// is itself, so erasing again adds no pointer: each call passes one
/// pointer, and each call that waits one boxed future; the answers given
/// at once box nothing.
#[derive(Clone)]
pub struct AnyStores(Arc<dyn DynStores>);

impl AnyStores {
    /// `stores`, erased (once: see [`Stores::erase`]).
    #[must_use]
    pub fn new(stores: impl Stores) -> Self {
        stores.erase()
    }

    pub(super) fn boxed(stores: impl Stores) -> Self {
        Self(Arc::new(stores))
    }
}

impl fmt::Debug for AnyStores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnyStores").finish_non_exhaustive()
    }
}

impl TimerStore for AnyStores {
    async fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> Result<Vec<Timestamp>, StoreError> {
        self.0.scheduled(partition, key, kind).await
    }

    async fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> Result<Vec<TimerEntry>, StoreError> {
        self.0.load(partition, from, until).await
    }
}

impl DeferStore for AnyStores {
    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        self.0.peek(partition, key)
    }

    async fn counts(&self, partition: &TopicPartition) -> Result<DeferCounts, StoreError> {
        self.0.counts(partition).await
    }

    fn counts_now(&self, partition: &TopicPartition) -> Option<DeferCounts> {
        self.0.counts_now(partition)
    }

    async fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        self.0.deferred(partition, key).await
    }
}

impl DedupStore for AnyStores {
    async fn contains(&self, key: DedupKey) -> Result<bool, StoreError> {
        self.0.contains(key).await
    }

    fn contains_now(&self, key: DedupKey) -> Option<bool> {
        self.0.contains_now(key)
    }
}

impl StateStore for AnyStores {
    async fn identify(&self, name: &str, identity: &str) -> Result<String, StoreError> {
        self.0.identify(name, identity).await
    }

    async fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> Result<Option<Bytes>, StoreError> {
        self.0.cell(partition, collection, key, item).await
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
        self.0
            .cells(partition, collection, key, range, direction, limit)
            .await
    }
}

impl Stores for AnyStores {
    fn durable(&self) -> bool {
        self.0.durable()
    }

    async fn open(&self, partition: &TopicPartition) -> Result<(), StoreError> {
        self.0.open(partition).await
    }

    fn close(&self, partition: &TopicPartition) {
        self.0.close(partition);
    }

    async fn commit(&self, partition: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        self.0.commit(partition, batch).await
    }

    fn commit_now(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        self.0.commit_now(partition, batch)
    }

    fn erase(self) -> AnyStores {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::AnyStores;
    use crate::broker::TopicPartition;
    use crate::clock::Timestamp;
    use crate::key::Key;
    use crate::store::{
        Batch, DedupKey, DedupStore, DeferCounts, DeferStore, Deferred, Direction, ItemRange,
        StateStore, StoreError, Stores, TimerEntry, TimerKind, TimerStore,
    };
    use bytes::Bytes;
    use std::sync::Arc;

    /// Erasing erased stores adds no pointer: the same allocation.
    #[test]
    fn erased_stores_erase_to_themselves() {
        let once = AnyStores::new(Nothing);
        let twice = once.clone().erase();
        assert!(Arc::ptr_eq(&once.0, &twice.0));
        let again = AnyStores::new(twice);
        assert!(Arc::ptr_eq(&once.0, &again.0));
    }

    /// Stores that hold nothing and refuse every write.
    #[derive(Clone)]
    struct Nothing;

    fn refused<T>() -> Result<T, StoreError> {
        Err(StoreError::rejected("nothing here"))
    }

    impl TimerStore for Nothing {
        async fn scheduled(
            &self,
            _: &TopicPartition,
            _: &Key,
            _: TimerKind,
        ) -> Result<Vec<Timestamp>, StoreError> {
            Ok(Vec::new())
        }

        async fn load(
            &self,
            _: &TopicPartition,
            _: Timestamp,
            _: Timestamp,
        ) -> Result<Vec<TimerEntry>, StoreError> {
            Ok(Vec::new())
        }
    }

    impl DeferStore for Nothing {
        async fn counts(&self, _: &TopicPartition) -> Result<DeferCounts, StoreError> {
            Ok(DeferCounts::default())
        }

        async fn deferred(
            &self,
            _: &TopicPartition,
            _: &Key,
        ) -> Result<Option<Deferred>, StoreError> {
            Ok(None)
        }
    }

    impl DedupStore for Nothing {
        async fn contains(&self, _: DedupKey) -> Result<bool, StoreError> {
            Ok(false)
        }
    }

    impl StateStore for Nothing {
        async fn identify(&self, _: &str, identity: &str) -> Result<String, StoreError> {
            Ok(identity.to_owned())
        }

        async fn cell(
            &self,
            _: &TopicPartition,
            _: &str,
            _: &Key,
            _: &[u8],
        ) -> Result<Option<Bytes>, StoreError> {
            Ok(None)
        }

        async fn cells(
            &self,
            _: &TopicPartition,
            _: &str,
            _: &Key,
            _: &ItemRange,
            _: Direction,
            _: usize,
        ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
            Ok(Vec::new())
        }
    }

    impl Stores for Nothing {
        fn durable(&self) -> bool {
            false
        }

        async fn commit(&self, _: &TopicPartition, _: Batch) -> Result<(), StoreError> {
            refused()
        }
    }
}
