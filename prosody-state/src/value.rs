//! One value per key.

use crate::codec::{decode, encode};
use bytes::Bytes;
use prosody_core::state::{Slot, StateError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;

/// The key's value of one collection, for one attempt.
///
/// Invariant: [`get`](Self::get) returns the last value this attempt set
/// (or `None` after its clear), else the committed one.
#[derive(Debug)]
pub struct ValueState<'a, T> {
    slot: Slot<'a>,
    _value: PhantomData<fn() -> T>,
}

impl<T> Clone for ValueState<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for ValueState<'_, T> {}

impl<'a, T: Serialize + DeserializeOwned + Send + Sync> ValueState<'a, T> {
    pub(crate) fn new(slot: Slot<'a>) -> Self {
        Self {
            slot,
            _value: PhantomData,
        }
    }

    fn name(&self) -> &'static str {
        self.slot.spec().name
    }

    /// The value, if there is one.
    pub async fn get(&self) -> Result<Option<T>, StateError> {
        match self.slot.get(&[]).await? {
            Some(bytes) => decode(self.name(), &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Sets the value. JSON `null` is refused ([`StateError::NullValue`]):
    /// [`clear`](Self::clear) instead.
    pub async fn set(&self, value: &T) -> Result<(), StateError> {
        let bytes = encode(self.name(), value)?;
        self.slot.put(Bytes::new(), bytes)
    }

    /// Removes the value.
    pub async fn clear(&self) -> Result<(), StateError> {
        self.slot.clear()
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
