//! The client's stores, whichever backend holds them: one opaque type, so
//! no signature of the facade names a backend and adding one changes none.

use bytes::Bytes;
use prosody_core::broker::TopicPartition;
use prosody_core::clock::Timestamp;
use prosody_core::key::Key;
use prosody_core::store::{
    Batch, DedupKey, DedupStore, DeferCounts, DeferStore, Deferred, Direction, ItemRange,
    StateStore, StoreError, Stores, TimerEntry, TimerKind, TimerStore,
};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// [`Stores`] with boxed futures, so any backend fits behind one pointer:
/// one method for each of the contracts' reads and of `Stores`' own.
///
/// Written by hand rather than generated with `dynosaur`: its macro erases
/// only the trait it annotates and copies that trait's supertraits into the
/// erased one, so on `Stores` (whose supertraits are the four read traits,
/// with their `impl Future` methods, and `Clone`) the erased trait is not
/// dyn-compatible, and the generated type implements none of the
/// supertraits. Erasing a flat trait instead would repeat these signatures
/// and still leave [`ClientStores`]' impls to write.
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
    #[allow(clippy::too_many_arguments, reason = "the trait method's arguments")]
    fn cells<'a>(
        &'a self,
        partition: &'a TopicPartition,
        collection: &'a str,
        key: &'a Key,
        range: &'a ItemRange,
        direction: Direction,
        limit: usize,
    ) -> Call<'a, Vec<(Bytes, Bytes)>>;
    fn commit<'a>(&'a self, partition: &'a TopicPartition, batch: Batch) -> Call<'a, ()>;
    fn commit_now(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch>;
    fn open<'a>(&'a self, partition: &'a TopicPartition) -> Call<'a, ()>;
    fn close(&self, partition: &TopicPartition);
    fn durable(&self) -> bool;
}

impl<S: Stores> DynStores for S {
    fn durable(&self) -> bool {
        Stores::durable(self)
    }

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

    fn open<'a>(&'a self, partition: &'a TopicPartition) -> Call<'a, ()> {
        Box::pin(Stores::open(self, partition))
    }

    fn close(&self, partition: &TopicPartition) {
        Stores::close(self, partition);
    }
}

/// The stores a client uses: in memory, on Cassandra, or the ones given to
/// [`ClientBuilder::stores`](crate::ClientBuilder::stores); clones share
/// them.
///
/// Each call goes through one pointer, and each async one through one
/// boxed future; the synchronous ones (`peek`, `contains_now`,
/// `commit_now`) box nothing. On the per-record path a backend that can
/// answer at once (the in-memory one) is asked only those.
#[derive(Clone)]
pub struct ClientStores {
    stores: Arc<dyn DynStores>,
}

impl ClientStores {
    /// Wraps a backend's stores.
    pub(crate) fn new(stores: impl Stores) -> Self {
        Self {
            stores: Arc::new(stores),
        }
    }
}

impl fmt::Debug for ClientStores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientStores").finish_non_exhaustive()
    }
}

impl TimerStore for ClientStores {
    async fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> Result<Vec<Timestamp>, StoreError> {
        self.stores.scheduled(partition, key, kind).await
    }

    async fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> Result<Vec<TimerEntry>, StoreError> {
        self.stores.load(partition, from, until).await
    }
}

impl DeferStore for ClientStores {
    async fn counts(&self, partition: &TopicPartition) -> Result<DeferCounts, StoreError> {
        self.stores.counts(partition).await
    }

    fn counts_now(&self, partition: &TopicPartition) -> Option<DeferCounts> {
        self.stores.counts_now(partition)
    }

    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        self.stores.peek(partition, key)
    }

    async fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        self.stores.deferred(partition, key).await
    }
}

impl DedupStore for ClientStores {
    async fn contains(&self, key: DedupKey) -> Result<bool, StoreError> {
        self.stores.contains(key).await
    }

    fn contains_now(&self, key: DedupKey) -> Option<bool> {
        self.stores.contains_now(key)
    }
}

impl StateStore for ClientStores {
    async fn identify(&self, name: &str, identity: &str) -> Result<String, StoreError> {
        self.stores.identify(name, identity).await
    }

    async fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> Result<Option<Bytes>, StoreError> {
        self.stores.cell(partition, collection, key, item).await
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
        self.stores
            .cells(partition, collection, key, range, direction, limit)
            .await
    }
}

impl Stores for ClientStores {
    fn durable(&self) -> bool {
        self.stores.durable()
    }

    async fn commit(&self, partition: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        self.stores.commit(partition, batch).await
    }

    fn commit_now(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        self.stores.commit_now(partition, batch)
    }

    async fn open(&self, partition: &TopicPartition) -> Result<(), StoreError> {
        self.stores.open(partition).await
    }

    fn close(&self, partition: &TopicPartition) {
        self.stores.close(partition);
    }
}
