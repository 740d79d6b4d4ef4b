//! Payload encoding and decoding.

use crate::broker::Record;
use crate::event::{Encoded, Event, Excise, Message};
use crate::key::Key;
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::any::{Any, TypeId};
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

    /// Whether [`Codec::decode_parsed`] uses a JSON parse of the payload:
    /// then the runtime keeps the parse it makes of a JSON object to read
    /// its `id`, and the payload is parsed once. `false` by default.
    fn takes_parsed(&self) -> bool {
        false
    }

    /// Decodes a payload from `parsed`, its JSON parse, or from its
    /// `bytes`: whichever gives what [`Codec::decode`] of the bytes gives.
    /// By default, from the bytes.
    fn decode_parsed(
        &self,
        parsed: serde_json::Value,
        bytes: &[u8],
    ) -> Result<Self::Value, CodecError> {
        drop(parsed);
        self.decode(bytes)
    }

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

    /// Only a codec of [`serde_json::Value`] takes the parse: it is the
    /// decoded payload itself. Other types decode from the bytes, as
    /// [`JsonCodec::decode`] does (a typed decode of a parse would accept a
    /// repeated field that one of the bytes refuses).
    fn takes_parsed(&self) -> bool {
        TypeId::of::<T>() == TypeId::of::<serde_json::Value>()
    }

    fn decode_parsed(&self, parsed: serde_json::Value, bytes: &[u8]) -> Result<T, CodecError> {
        let mut slot = Some(parsed);
        match (&mut slot as &mut dyn Any).downcast_mut::<Option<T>>() {
            Some(value) => value.take().map_or_else(|| self.decode(bytes), Ok),
            None => self.decode(bytes),
        }
    }

    fn encode(&self, value: &T) -> Result<Vec<u8>, CodecError> {
        serde_json::to_vec(value).map_err(CodecError::new)
    }
}

/// A record whose key or payload does not decode: a permanent failure of
/// its handler call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The record's key is not UTF-8.
    #[error("the record key is not UTF-8: {0}")]
    Key(#[source] std::str::Utf8Error),
    /// The codec rejected the payload.
    #[error("the payload does not decode: {0}")]
    Payload(#[source] CodecError),
    /// The codec panicked on the payload.
    #[error("the codec panicked decoding the payload")]
    Panicked,
}

/// The key a record is queued under: its key as text, the empty key when
/// it has none, and a lossy rendering when it is not UTF-8 (the handler
/// service then refuses the record, see [`decode`]).
pub fn record_key(record: &Record) -> Key {
    match record.key.as_deref().map(std::str::from_utf8) {
        None => Key::from(""),
        Some(Ok(key)) => Key::from(key),
        Some(Err(_)) => Key::from(
            String::from_utf8_lossy(record.key.as_deref().unwrap_or_default()).into_owned(),
        ),
    }
}

/// The event a record carries for `key`, not decoded: an excise for a
/// tombstone, else a message with its `id`.
pub fn encoded(key: &Key, record: &Record) -> Event<Encoded> {
    encoded_keeping(key, record, false)
}

/// As [`encoded`]; with `keep`, a payload that is a JSON object is parsed
/// once, its `id` read from the parse and the parse kept in the
/// [`Encoded`] payload for the codec (see [`Codec::takes_parsed`]).
/// Either way the `id` is the one [`encoded`] reads, for any payload that
/// is JSON text.
pub fn encoded_keeping(key: &Key, record: &Record, keep: bool) -> Event<Encoded> {
    let Some(payload) = &record.payload else {
        return Event::Excise(Excise {
            topic: record.topic.clone(),
            partition: record.partition,
            offset: record.offset,
            timestamp: record.timestamp,
            key: key.clone(),
            raw_key: record.key.clone(),
            headers: record.headers.clone(),
        });
    };
    let (id, encoded) = if keep {
        crate::envelope::parse(payload)
    } else {
        (crate::envelope::id(payload), Encoded::new())
    };
    Event::Message(Message {
        id,
        raw: payload.clone(),
        topic: record.topic.clone(),
        partition: record.partition,
        offset: record.offset,
        timestamp: record.timestamp,
        key: key.clone(),
        raw_key: record.key.clone(),
        payload: encoded,
        headers: record.headers.clone(),
    })
}

/// Checks that a raw key is UTF-8.
fn check_key(raw_key: Option<&Bytes>) -> Result<(), DecodeError> {
    match raw_key {
        Some(raw) => std::str::from_utf8(raw)
            .map(|_| ())
            .map_err(DecodeError::Key),
        None => Ok(()),
    }
}

/// Decodes an event of the stack for the handler: its key must be UTF-8
/// and its payload must decode with `codec`. Timers carry neither.
pub fn decode<K: Codec>(codec: &K, event: Event<Encoded>) -> Result<Event<K::Value>, DecodeError> {
    match event {
        Event::Message(mut message) => {
            check_key(message.raw_key.as_ref())?;
            let payload = match message.payload.take() {
                Some(parsed) => codec.decode_parsed(parsed, &message.raw),
                None => codec.decode(&message.raw),
            }
            .map_err(DecodeError::Payload)?;
            Ok(Event::Message(message.with_payload(payload)))
        }
        Event::Excise(excise) => {
            check_key(excise.raw_key.as_ref())?;
            Ok(Event::Excise(excise))
        }
        Event::Timer(timer) => Ok(Event::Timer(timer)),
    }
}

#[cfg(test)]
mod tests {
    use super::{Codec, JsonCodec, encoded_keeping};
    use crate::broker::Record;
    use crate::event::Event;
    use crate::key::Key;
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

    /// The handler service's decode: a message needs a UTF-8 key and a
    /// payload the codec takes; an excise needs a UTF-8 key; the record's
    /// bytes stay as they came.
    #[test]
    fn decoding_checks_the_key_and_the_payload() {
        use super::{DecodeError, decode, encoded, record_key};
        use crate::broker::Record;
        use crate::event::{Event, Headers};
        use bytes::Bytes;
        let record = |key: &[u8], payload: Option<&'static [u8]>| Record {
            topic: "t".into(),
            partition: 0,
            offset: 7,
            timestamp: crate::clock::Timestamp::default(),
            key: Some(Bytes::copy_from_slice(key)),
            payload: payload.map(Bytes::from_static),
            headers: Headers::new(),
        };
        let codec = JsonCodec::<Value>::new();
        let event = |record: &Record| encoded(&record_key(record), record);
        let good = record(b"k", Some(br#"{"id":"a"}"#));
        match decode(&codec, event(&good)) {
            Ok(Event::Message(m)) => {
                assert_eq!((m.key.as_str(), m.id.as_deref()), ("k", Some("a")));
                assert_eq!(m.payload, json!({"id": "a"}));
                assert_eq!(m.raw_key.as_deref(), Some(&b"k"[..]));
            }
            other => panic!("a message, got {other:?}"),
        }
        let bad_payload = record(b"k", Some(b"not json"));
        let error = decode(&codec, event(&bad_payload)).err();
        assert!(matches!(error, Some(DecodeError::Payload(_))), "{error:?}");
        for payload in [Some(&b"{}"[..]), None] {
            let bad_key = record(&[0xFF, b'k'], payload);
            assert_eq!(record_key(&bad_key).as_str(), "\u{FFFD}k");
            let error = decode(&codec, event(&bad_key)).err();
            assert!(matches!(error, Some(DecodeError::Key(_))), "{error:?}");
        }
    }

    #[test]
    fn malformed_json_is_an_error_naming_the_problem() {
        let codec = JsonCodec::<Value>::new();
        let err = codec.decode(b"{not json").err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("key must be a string")));
    }

    fn record(payload: &[u8]) -> Record {
        Record {
            topic: "t".into(),
            partition: 0,
            offset: 0,
            timestamp: crate::Timestamp::default(),
            key: Some("k".into()),
            payload: Some(payload.to_vec().into()),
            headers: crate::event::Headers::default(),
        }
    }

    #[test]
    fn the_parse_goes_to_a_value_codec_once_and_a_clone_decodes_the_bytes() {
        let key = Key::from("k");
        let Event::Message(mut message) = encoded_keeping(&key, &record(br#"{"id":1}"#), true)
        else {
            panic!("a message");
        };
        assert_eq!(message.id.as_deref(), Some("1"));
        let copy = message.clone();
        assert!(message.payload.take().is_some());
        assert!(
            copy.payload.clone().take().is_none(),
            "a clone holds no parse"
        );
        let Event::Message(mut unkept) = encoded_keeping(&key, &record(br#"{"id":1}"#), false)
        else {
            panic!("a message");
        };
        assert_eq!(unkept.id.as_deref(), Some("1"));
        assert!(unkept.payload.take().is_none());
    }

    #[test]
    fn only_a_codec_of_values_takes_the_parse() {
        assert!(JsonCodec::<Value>::new().takes_parsed());
        assert!(!JsonCodec::<std::collections::BTreeMap<String, u32>>::new().takes_parsed());
        // A typed codec decodes the bytes, so a repeated field is refused
        // as without a parse.
        let typed = JsonCodec::<std::collections::BTreeMap<String, u32>>::new();
        let bytes = br#"{"a":1,"a":"x"}"#;
        let parsed: Value = serde_json::from_slice(bytes).unwrap_or_default();
        assert!(typed.decode_parsed(parsed, bytes).is_err());
        let value = JsonCodec::<Value>::new();
        assert_eq!(
            value.decode_parsed(json!({"n": 1}), b"ignored").ok(),
            Some(json!({"n": 1}))
        );
    }
}
