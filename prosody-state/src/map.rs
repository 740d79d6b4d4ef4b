//! Values under string keys, per key, in key order.

use crate::codec::{Encoding, Json};
use crate::scan::scan;
use bytes::Bytes;
use futures_util::Stream;
use prosody_core::state::{Slot, StateError};
use prosody_core::store::{Direction, ItemRange};
use std::future;
use std::marker::PhantomData;

/// The key's map of one collection, for one attempt: values `V` stored as
/// `E` ([`Json`], or [`Messages`](crate::Messages) for messages).
///
/// Invariant: every read (point reads and scans) sees the committed
/// entries under this attempt's changes; scans run in key order (byte
/// order of the UTF-8 keys, which is `str` order).
#[derive(Debug)]
pub struct MapState<'a, V, E = Json> {
    slot: Slot<'a>,
    _value: PhantomData<fn() -> (V, E)>,
}

pub(crate) fn entry_name(collection: &'static str, item: &[u8]) -> Result<String, StateError> {
    String::from_utf8(item.to_vec()).map_err(|_| StateError::Malformed {
        collection,
        reason: "a map entry's key is not UTF-8",
    })
}

impl<V, E> Clone for MapState<'_, V, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V, E> Copy for MapState<'_, V, E> {}

impl<'a, V: Send + Sync + 'a, E: Encoding<V>> MapState<'a, V, E> {
    pub(crate) fn new(slot: Slot<'a>) -> Self {
        Self {
            slot,
            _value: PhantomData,
        }
    }

    fn name(&self) -> &'static str {
        self.slot.spec().name
    }

    /// The value under `entry`.
    pub async fn get(&self, entry: &str) -> Result<Option<V>, StateError> {
        match self.slot.get(entry.as_bytes()).await? {
            Some(cell) => E::decode(self.slot, cell).await.map(Some),
            None => Ok(None),
        }
    }

    /// The values under `entries`, in their order.
    pub async fn get_many(&self, entries: &[&str]) -> Result<Vec<Option<V>>, StateError> {
        let mut values = Vec::with_capacity(entries.len());
        for entry in entries {
            values.push(self.get(entry).await?);
        }
        Ok(values)
    }

    /// Whether `entry` has a value.
    pub async fn contains(&self, entry: &str) -> Result<bool, StateError> {
        Ok(self.slot.get(entry.as_bytes()).await?.is_some())
    }

    /// Sets `entry` to `value`. A JSON collection refuses `null`
    /// ([`StateError::NullValue`]): [`remove`](Self::remove) instead.
    pub async fn set(&self, entry: &str, value: &V) -> Result<(), StateError> {
        let bytes = E::encode(self.name(), value)?;
        self.slot
            .put(Bytes::copy_from_slice(entry.as_bytes()), bytes)
    }

    /// Removes `entry`.
    pub async fn remove(&self, entry: &str) -> Result<(), StateError> {
        self.slot.delete(Bytes::copy_from_slice(entry.as_bytes()))
    }

    /// Removes every entry.
    pub async fn clear(&self) -> Result<(), StateError> {
        self.slot.clear()
    }

    /// The entries in key order (`Forward`) or reversed, fetched in chunks.
    pub fn items(
        &self,
        direction: Direction,
    ) -> impl Stream<Item = Result<(String, V), StateError>> + Send + 'a {
        let slot = self.slot;
        scan(
            slot,
            ItemRange::all(),
            direction,
            move |item, value| async move {
                let entry = entry_name(slot.spec().name, &item)?;
                Ok((entry, E::decode(slot, value).await?))
            },
        )
    }

    /// The keys in order (`Forward`) or reversed, fetched in chunks.
    pub fn keys(
        &self,
        direction: Direction,
    ) -> impl Stream<Item = Result<String, StateError>> + Send + 'a {
        let name = self.name();
        scan(self.slot, ItemRange::all(), direction, move |item, _| {
            future::ready(entry_name(name, &item))
        })
    }

    /// The values in key order, fetched in chunks.
    pub fn values(&self) -> impl Stream<Item = Result<V, StateError>> + Send + 'a {
        let slot = self.slot;
        scan(
            slot,
            ItemRange::all(),
            Direction::Forward,
            move |_, value| E::decode(slot, value),
        )
    }

    /// Writes this collection's pending changes now: a later failure of the
    /// attempt does not undo them.
    pub async fn commit(&self) -> Result<(), StateError> {
        self.slot.commit().await
    }

    /// Drops this collection's changes since its last commit.
    pub fn rollback(&self) -> Result<(), StateError> {
        self.slot.rollback()
    }
}
