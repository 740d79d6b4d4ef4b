//! One value per key.

use crate::codec::{Encoding, Json};
use bytes::Bytes;
use prosody_core::state::{Slot, StateError};
use std::marker::PhantomData;

/// The key's value of one collection, for one attempt: a `T` stored as
/// `E` ([`Json`], or [`Messages`](crate::Messages) for a message).
///
/// Invariant: [`get`](Self::get) returns the last value this attempt set
/// (or `None` after its clear), else the committed one.
#[derive(Debug)]
pub struct ValueState<'a, T, E = Json> {
    slot: Slot<'a>,
    _value: PhantomData<fn() -> (T, E)>,
}

impl<T, E> Clone for ValueState<'_, T, E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T, E> Copy for ValueState<'_, T, E> {}

impl<'a, T: Send + Sync + 'a, E: Encoding<T>> ValueState<'a, T, E> {
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
            Some(cell) => E::decode(self.slot, cell).await.map(Some),
            None => Ok(None),
        }
    }

    /// Sets the value. A JSON collection refuses `null`
    /// ([`StateError::NullValue`]): [`clear`](Self::clear) instead.
    pub async fn set(&self, value: &T) -> Result<(), StateError> {
        let bytes = E::encode(self.name(), value)?;
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
