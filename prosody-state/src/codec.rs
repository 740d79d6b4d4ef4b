//! How a collection's items become cells and come back: as JSON, or as
//! the position of a Kafka message read back from the log.

use bytes::Bytes;
use prosody_core::Message;
use prosody_core::state::{Slot, StateError, message_cell};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::future::{self, Future};

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Json {}
    impl Sealed for super::Messages {}
}

/// How the items `T` of a collection are stored. Sealed: [`Json`] and
/// [`Messages`] are the two encodings.
///
/// Invariant: `decode(encode(item))` yields `item` (for [`Messages`], as
/// long as the log holds the message).
pub trait Encoding<T>: sealed::Sealed + Send + Sync + 'static {
    /// The cell of `item`.
    ///
    /// # Errors
    ///
    /// [`StateError::NullValue`] for a JSON `null`, and
    /// [`StateError::Codec`] for a value serde cannot encode.
    fn encode(collection: &'static str, item: &T) -> Result<Bytes, StateError>;

    /// The item of a cell of `slot`'s collection.
    fn decode(
        slot: Slot<'_>,
        cell: Bytes,
    ) -> impl Future<Output = Result<T, StateError>> + Send + '_;
}

/// Items are a serde type, stored as JSON.
#[derive(Clone, Copy, Debug, Default)]
pub struct Json;

/// Items are Kafka messages, stored by their position in the log and read
/// back when read (the payload decodes as JSON).
#[derive(Clone, Copy, Debug, Default)]
pub struct Messages;

impl<T: Serialize + DeserializeOwned + Send + 'static> Encoding<T> for Json {
    fn encode(collection: &'static str, item: &T) -> Result<Bytes, StateError> {
        encode(collection, item)
    }

    fn decode(
        slot: Slot<'_>,
        cell: Bytes,
    ) -> impl Future<Output = Result<T, StateError>> + Send + '_ {
        future::ready(decode(slot.spec().name, &cell))
    }
}

impl<P: DeserializeOwned + Send + Sync + 'static> Encoding<Message<P>> for Messages {
    fn encode(_: &'static str, message: &Message<P>) -> Result<Bytes, StateError> {
        Ok(message_cell(message))
    }

    async fn decode(slot: Slot<'_>, cell: Bytes) -> Result<Message<P>, StateError> {
        let message = slot.message(&cell).await?;
        let payload = decode(slot.spec().name, &message.raw)?;
        Ok(message.with_payload(payload))
    }
}

/// `value` as JSON.
fn encode<T: Serialize>(collection: &'static str, value: &T) -> Result<Bytes, StateError> {
    let bytes =
        serde_json::to_vec(value).map_err(|source| StateError::Codec { collection, source })?;
    if bytes == b"null" {
        return Err(StateError::NullValue { collection });
    }
    Ok(Bytes::from(bytes))
}

/// A JSON item.
pub(crate) fn decode<T: DeserializeOwned>(
    collection: &'static str,
    bytes: &[u8],
) -> Result<T, StateError> {
    serde_json::from_slice(bytes).map_err(|source| StateError::Codec { collection, source })
}
