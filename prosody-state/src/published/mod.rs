//! Readers of published collections: another group's JSON collection, read
//! by key, as its owners committed it.
//!
//! A reader reads the owner's stores directly (through [`CachedReads`]),
//! in the partition the key lands on in the owner's topic (Kafka's
//! partitioner). It never sees a handler's pending changes, and writes
//! nothing: it takes no partition and fences nothing.

mod cache;

pub use cache::{CachedReads, SharedReads};

#[cfg(test)]
mod tests;

use crate::codec::{Json, decode};
use crate::map::entry_name;
use crate::{CHUNK, DequeState, MapState, ValueState};
use bytes::Bytes;
use futures_util::Stream;
use futures_util::future::BoxFuture;
use futures_util::stream::{self, StreamExt};
use prosody_core::broker::{TopicPartition, partition_for_key};
use prosody_core::key::Key;
use prosody_core::state::{Reading, Spec, StateError};
use prosody_core::store::{AnyStores, Direction, ItemRange, Stores};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;
use std::sync::Arc;

/// What a reader checks before each read: that the collection is still
/// published as it reads it (the facade re-reads its publication once per
/// cache window).
pub trait Gate: Send + Sync + 'static {
    /// `Ok` while the collection may be read; else why not
    /// ([`StateError::Unpublished`]).
    fn check(&self) -> BoxFuture<'_, Result<(), StateError>>;
}

/// Where a published collection's cells are: the owning group's stores,
/// the topic whose partitions hold them, and its partition count.
///
/// Invariant: `partitions` is at least 1, so every key has a partition;
/// every read passes the gate first.
pub struct Source<S> {
    /// The group's stores, `S` erased once, for the views of its reads.
    erased: AnyStores,
    stores: PhantomData<fn() -> S>,
    topic: Arc<str>,
    partitions: i32,
    gate: Option<Arc<dyn Gate>>,
}

impl<S> std::fmt::Debug for Source<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("topic", &self.topic)
            .field("partitions", &self.partitions)
            .finish_non_exhaustive()
    }
}

/// A definition whose collection other groups may read: the JSON
/// collections (values, maps, deques).
pub trait Publishable {
    /// The reader of the collection over stores `S`.
    type Reader<S>;

    /// The collection's specification.
    fn spec(&self) -> Spec;

    /// The reader of the collection in `source`.
    fn reader<S>(&self, source: Source<S>) -> Self::Reader<S>;
}

macro_rules! publishable {
    ($($def:ident => $reader:ident),*) => {$(
        impl<T> Publishable for crate::$def<T> {
            type Reader<S> = $reader<T, S>;

            fn spec(&self) -> Spec {
                crate::$def::<T>::spec(self)
            }

            fn reader<S>(&self, source: Source<S>) -> Self::Reader<S> {
                $reader::new(source, Publishable::spec(self))
            }
        }
    )*};
}

publishable!(ValueDef => PublishedValue, MapDef => PublishedMap, DequeDef => PublishedDeque);

impl<S: Stores> Source<S> {
    /// The cells of the group `stores` reads, in `topic`'s `partitions`
    /// partitions (at least 1).
    #[must_use]
    pub fn new(stores: S, topic: impl Into<Arc<str>>, partitions: i32) -> Self {
        Self {
            erased: stores.erase(),
            stores: PhantomData,
            topic: topic.into(),
            partitions: partitions.max(1),
            gate: None,
        }
    }

    /// The same source, checking `gate` before each read.
    #[must_use]
    pub fn gated(mut self, gate: Arc<dyn Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Passes the gate, if any.
    async fn open(&self) -> Result<(), StateError> {
        match &self.gate {
            Some(gate) => gate.check().await,
            None => Ok(()),
        }
    }

    /// The view of `key`'s collection `spec`, once the gate lets it read.
    async fn open_reading(&self, key: &str, spec: Spec) -> Result<Reading, StateError> {
        self.open().await?;
        self.reading(key, spec)
    }

    /// The view of `key`'s collection `spec`.
    fn reading(&self, key: &str, spec: Spec) -> Result<Reading, StateError> {
        let key = Key::from(key);
        let partition = partition_for_key(key.as_bytes(), self.partitions);
        let partition = TopicPartition::new(Arc::clone(&self.topic), partition);
        Reading::new(self.erased.clone(), partition, key, spec)
    }

    /// The items of `range` in `direction` of `key`'s collection `spec`,
    /// [`CHUNK`] at a time; `range` of `None` reads a deque's slots.
    fn scan<T: Send + 'static>(
        &self,
        key: &str,
        spec: Spec,
        range: Option<ItemRange>,
        direction: Direction,
        map: fn(&'static str, Bytes, Bytes) -> Result<T, StateError>,
    ) -> impl Stream<Item = Result<T, StateError>> + Send + 'static {
        let reading = self.reading(key, spec).map(Arc::new);
        let gate = self.gate.clone();
        let pages = stream::unfold(Some((reading, range, gate)), move |state| async move {
            let (reading, range, gate) = state?;
            if let Some(gate) = gate
                && let Err(error) = gate.check().await
            {
                return Some((Err(error), None));
            }
            let reading = match reading {
                Ok(reading) => reading,
                Err(error) => return Some((Err(error), None)),
            };
            let page = async {
                let slot = reading.slot()?;
                let range = match range {
                    Some(range) => range,
                    None => DequeState::<(), Json>::new(slot).slots().await?,
                };
                slot.page(range, direction, CHUNK).await
            };
            match page.await {
                Ok(page) => {
                    let next = page.next.map(|next| (Ok(reading), Some(next), None));
                    Some((Ok(page.items), next))
                }
                Err(error) => Some((Err(error), None)),
            }
        });
        let name = spec.name;
        pages.flat_map(move |page| {
            let items: Vec<Result<T, StateError>> = match page {
                Ok(items) => items
                    .into_iter()
                    .map(|(item, value)| map(name, item, value))
                    .collect(),
                Err(error) => vec![Err(error)],
            };
            stream::iter(items)
        })
    }
}

impl<S> Clone for Source<S> {
    fn clone(&self) -> Self {
        Self {
            erased: self.erased.clone(),
            stores: PhantomData,
            topic: Arc::clone(&self.topic),
            partitions: self.partitions,
            gate: self.gate.clone(),
        }
    }
}

/// A reader of a published value collection: each key's value.
#[derive(Debug)]
pub struct PublishedValue<T, S> {
    source: Source<S>,
    spec: Spec,
    value: PhantomData<fn() -> T>,
}

/// A reader of a published map collection: each key's entries.
#[derive(Debug)]
pub struct PublishedMap<V, S> {
    source: Source<S>,
    spec: Spec,
    value: PhantomData<fn() -> V>,
}

/// A reader of a published deque collection: each key's items.
#[derive(Debug)]
pub struct PublishedDeque<T, S> {
    source: Source<S>,
    spec: Spec,
    value: PhantomData<fn() -> T>,
}

macro_rules! reader {
    ($name:ident, $param:ident) => {
        impl<$param, S> $name<$param, S> {
            /// A reader of the collection `spec` in `source`.
            #[must_use]
            pub fn new(source: Source<S>, spec: Spec) -> Self {
                Self {
                    source,
                    spec,
                    value: PhantomData,
                }
            }
        }
    };
}

reader!(PublishedValue, T);
reader!(PublishedMap, V);
reader!(PublishedDeque, T);

impl<T, S> PublishedValue<T, S>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
    S: Stores,
{
    /// `key`'s value.
    ///
    /// # Errors
    ///
    /// [`StateError::Store`] when the store fails, [`StateError::Codec`]
    /// when the value is not a `T`.
    pub async fn get(&self, key: &str) -> Result<Option<T>, StateError> {
        let reading = self.source.open_reading(key, self.spec).await?;
        ValueState::<T, Json>::new(reading.slot()?).get().await
    }
}

impl<V, S> PublishedMap<V, S>
where
    V: Serialize + DeserializeOwned + Send + Sync + 'static,
    S: Stores,
{
    /// The value under `entry` of `key`'s map.
    ///
    /// # Errors
    ///
    /// As [`PublishedValue::get`].
    pub async fn get(&self, key: &str, entry: &str) -> Result<Option<V>, StateError> {
        let reading = self.source.open_reading(key, self.spec).await?;
        MapState::<V, Json>::new(reading.slot()?).get(entry).await
    }

    /// The values under `entries` of `key`'s map, in their order.
    ///
    /// # Errors
    ///
    /// As [`PublishedValue::get`].
    pub async fn get_many(
        &self,
        key: &str,
        entries: &[&str],
    ) -> Result<Vec<Option<V>>, StateError> {
        let reading = self.source.open_reading(key, self.spec).await?;
        MapState::<V, Json>::new(reading.slot()?)
            .get_many(entries)
            .await
    }

    /// Whether `entry` of `key`'s map has a value.
    ///
    /// # Errors
    ///
    /// As [`PublishedValue::get`].
    pub async fn contains(&self, key: &str, entry: &str) -> Result<bool, StateError> {
        let reading = self.source.open_reading(key, self.spec).await?;
        MapState::<V, Json>::new(reading.slot()?)
            .contains(entry)
            .await
    }

    /// The entries of `key`'s map in key order (`Forward`) or reversed,
    /// fetched [`CHUNK`] at a time.
    pub fn items(
        &self,
        key: &str,
        direction: Direction,
    ) -> impl Stream<Item = Result<(String, V), StateError>> + Send + 'static {
        self.source.scan(
            key,
            self.spec,
            Some(ItemRange::all()),
            direction,
            |name, item, value| Ok((entry_name(name, &item)?, decode(name, &value)?)),
        )
    }

    /// The keys of `key`'s map, in order or reversed.
    pub fn keys(
        &self,
        key: &str,
        direction: Direction,
    ) -> impl Stream<Item = Result<String, StateError>> + Send + 'static {
        self.source.scan(
            key,
            self.spec,
            Some(ItemRange::all()),
            direction,
            |name, item, _| entry_name(name, &item),
        )
    }

    /// The values of `key`'s map, in key order.
    pub fn values(&self, key: &str) -> impl Stream<Item = Result<V, StateError>> + Send + 'static {
        self.source.scan(
            key,
            self.spec,
            Some(ItemRange::all()),
            Direction::Forward,
            |name, _, value| decode(name, &value),
        )
    }
}

impl<T, S> PublishedDeque<T, S>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
    S: Stores,
{
    /// The item `index` places from the front of `key`'s deque.
    ///
    /// # Errors
    ///
    /// As [`PublishedValue::get`].
    pub async fn get(&self, key: &str, index: u64) -> Result<Option<T>, StateError> {
        let reading = self.source.open_reading(key, self.spec).await?;
        DequeState::<T, Json>::new(reading.slot()?).get(index).await
    }

    /// How many items `key`'s deque holds.
    ///
    /// # Errors
    ///
    /// As [`PublishedValue::get`].
    pub async fn len(&self, key: &str) -> Result<u64, StateError> {
        let reading = self.source.open_reading(key, self.spec).await?;
        DequeState::<T, Json>::new(reading.slot()?).len().await
    }

    /// Whether `key`'s deque is empty.
    ///
    /// # Errors
    ///
    /// As [`PublishedValue::get`].
    pub async fn is_empty(&self, key: &str) -> Result<bool, StateError> {
        Ok(self.len(key).await? == 0)
    }

    /// The front item of `key`'s deque.
    ///
    /// # Errors
    ///
    /// As [`PublishedValue::get`].
    pub async fn peek_front(&self, key: &str) -> Result<Option<T>, StateError> {
        let reading = self.source.open_reading(key, self.spec).await?;
        DequeState::<T, Json>::new(reading.slot()?)
            .peek_front()
            .await
    }

    /// The back item of `key`'s deque.
    ///
    /// # Errors
    ///
    /// As [`PublishedValue::get`].
    pub async fn peek_back(&self, key: &str) -> Result<Option<T>, StateError> {
        let reading = self.source.open_reading(key, self.spec).await?;
        DequeState::<T, Json>::new(reading.slot()?)
            .peek_back()
            .await
    }

    /// The items of `key`'s deque front to back (`Forward`) or back to
    /// front, fetched [`CHUNK`] at a time.
    pub fn values(
        &self,
        key: &str,
        direction: Direction,
    ) -> impl Stream<Item = Result<T, StateError>> + Send + 'static {
        self.source
            .scan(key, self.spec, None, direction, |name, _, value| {
                decode(name, &value)
            })
    }
}
