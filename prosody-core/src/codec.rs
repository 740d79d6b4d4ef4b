//! Payload encoding and decoding.

use crate::broker::Record;
use crate::error::HandlerError;
use crate::event::{Event, Excise, Message};
use crate::key::Key;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;
use std::marker::PhantomData;

/// A payload that could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CodecError(#[source] Box<dyn std::error::Error + Send + Sync>);

impl CodecError {
    /// Wraps the underlying encoder or decoder error.
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self(error.into())
    }
}

/// Turns payload bytes into values and back.
///
/// Invariant: `decode(encode(v))` yields a value equal to `v`.
pub trait Codec: Clone + Send + Sync + 'static {
    /// The decoded payload type.
    type Value: Send + Sync + 'static;

    /// Decodes a payload.
    fn decode(&self, bytes: &[u8]) -> Result<Self::Value, CodecError>;

    /// Encodes a payload.
    fn encode(&self, value: &Self::Value) -> Result<Vec<u8>, CodecError>;
}

/// JSON through serde; the default codec, decoding to [`serde_json::Value`]
/// unless a typed payload is named.
pub struct JsonCodec<T = serde_json::Value>(PhantomData<fn() -> T>);

impl<T> JsonCodec<T> {
    /// A JSON codec for `T`.
    #[must_use]
    pub const fn new() -> Self {
        Self(PhantomData)
    }
}

impl<T> Default for JsonCodec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for JsonCodec<T> {
    fn clone(&self) -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for JsonCodec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JsonCodec")
    }
}

impl<T> Codec for JsonCodec<T>
where
    T: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    type Value = T;

    fn decode(&self, bytes: &[u8]) -> Result<T, CodecError> {
        serde_json::from_slice(bytes).map_err(CodecError::new)
    }

    fn encode(&self, value: &T) -> Result<Vec<u8>, CodecError> {
        serde_json::to_vec(value).map_err(CodecError::new)
    }
}

/// The event a record carries for `key`: an excise for a tombstone, else
/// a message with its decoded payload and `id`. A payload the codec
/// rejects is a permanent error.
pub(crate) fn decode_record<K: Codec>(
    codec: &K,
    key: &Key,
    record: &Record,
) -> Result<Event<K::Value>, HandlerError> {
    let Some(payload) = record.payload.as_deref() else {
        return Ok(Event::Excise(Excise {
            topic: record.topic.clone(),
            partition: record.partition,
            offset: record.offset,
            timestamp: record.timestamp,
            key: key.clone(),
            headers: record.headers.clone(),
        }));
    };
    let id = crate::envelope::id(payload);
    let decoded = codec.decode(payload).map_err(HandlerError::permanent)?;
    Ok(Event::Message(Message {
        id,
        raw: record.payload.clone().unwrap_or_default(),
        topic: record.topic.clone(),
        partition: record.partition,
        offset: record.offset,
        timestamp: record.timestamp,
        key: key.clone(),
        payload: decoded,
        headers: record.headers.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::{Codec, JsonCodec};
    use proptest::prelude::*;
    use serde_json::{Value, json};

    proptest! {
        #[test]
        fn json_round_trips(id in any::<u64>(), kind in "[a-z.]{0,12}", n in any::<i32>()) {
            let codec = JsonCodec::<Value>::new();
            let value = json!({"id": id, "type": kind, "n": n});
            let bytes = codec.encode(&value).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back = codec.decode(&bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back, value);
        }
    }

    #[test]
    fn malformed_json_is_an_error_naming_the_problem() {
        let codec = JsonCodec::<Value>::new();
        let err = codec.decode(b"{not json").err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("key must be a string")));
    }
}
