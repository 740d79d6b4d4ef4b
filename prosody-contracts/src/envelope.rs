//! The fields the library reads from a JSON payload without decoding it:
//! its `id`, for deduplication.

use crate::event::Encoded;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// The payload's `id`: a string as it is, a number as its JSON text. `None`
/// when the payload is not a JSON object, has no `id`, or its `id` is of
/// another type. Of several `id` fields the last counts, as in a decoded
/// payload. Nothing but the `id` is kept while reading. Field names are
/// compared as bytes and not checked further: a payload whose other names
/// are not valid JSON text (not UTF-8, raw control characters, unpaired
/// surrogate escapes) may have an `id` here, and fails to decode in the
/// handler service, which settles it as a permanent failure.
pub(crate) fn id(payload: &[u8]) -> Option<Arc<str>> {
    let mut reader = serde_json::Deserializer::from_slice(payload);
    let id = reader.deserialize_map(Fields).ok()?;
    reader.end().ok()?;
    id
}

/// A payload parsed once: its `id` and, for a JSON object, the parse to
/// decode it from. The `id` is always [`id`]'s: a payload that does not
/// parse as a [`serde_json::Value`] has its `id` read as [`id`] reads it.
pub(crate) fn parse(payload: &[u8]) -> (Option<Arc<str>>, Encoded) {
    let object = payload
        .iter()
        .find(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
        .is_some_and(|first| *first == b'{');
    if !object {
        return (None, Encoded::new());
    }
    match serde_json::from_slice::<Value>(payload) {
        Ok(value) => (id_of(&value), Encoded::parsed(value)),
        // Not a `Value` (nested deeper than its parser goes, say), though
        // maybe JSON text: its `id` as `id` reads it, and the bytes.
        Err(_) => (id(payload), Encoded::new()),
    }
}

/// The `id` of a parsed payload, as [`id`] reads it from the bytes.
fn id_of(value: &Value) -> Option<Arc<str>> {
    match value.get("id")? {
        Value::String(text) => Some(Arc::from(text.as_str())),
        Value::Number(number) => Some(Arc::from(number.to_string())),
        _ => None,
    }
}

/// Reads an object's fields, keeping the `id`.
struct Fields;

impl<'de> Visitor<'de> for Fields {
    type Value = Option<Arc<str>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut id = None;
        while let Some(is_id) = map.next_key_seed(IsId)? {
            if is_id {
                id = map.next_value_seed(IdValue)?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(id)
    }
}

/// Whether a field's name is `id`, without copying it. The name is read
/// as bytes, escapes resolved and nothing else checked: comparing it with
/// `id` needs no more.
struct IsId;

impl<'de> DeserializeSeed<'de> for IsId {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_bytes(self)
    }
}

impl Visitor<'_> for IsId {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_bytes<E: de::Error>(self, name: &[u8]) -> Result<bool, E> {
        Ok(name == b"id")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<bool, E> {
        Ok(name == "id")
    }
}

/// An `id` value: text for a string or a number, `None` for any other.
struct IdValue;

impl<'de> DeserializeSeed<'de> for IdValue {
    type Value = Option<Arc<str>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IdValue {
    type Value = Option<Arc<str>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(Some(Arc::from(text)))
    }

    fn visit_u64<E: de::Error>(self, number: u64) -> Result<Self::Value, E> {
        Ok(Some(Arc::from(
            serde_json::Number::from(number).to_string(),
        )))
    }

    fn visit_i64<E: de::Error>(self, number: i64) -> Result<Self::Value, E> {
        Ok(Some(Arc::from(
            serde_json::Number::from(number).to_string(),
        )))
    }

    fn visit_f64<E: de::Error>(self, number: f64) -> Result<Self::Value, E> {
        Ok(serde_json::Number::from_f64(number).map(|number| Arc::from(number.to_string())))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::{id, parse};
    use proptest::prelude::*;
    use serde_json::{Value, json};

    #[test]
    fn reads_string_and_number_ids_only() {
        assert_eq!(id(br#"{"id":"a-1","n":2}"#).as_deref(), Some("a-1"));
        assert_eq!(id(br#"{"id":"esc\"aped"}"#).as_deref(), Some("esc\"aped"));
        assert_eq!(id(br#"{"n":1,"id":42}"#).as_deref(), Some("42"));
        assert_eq!(id(br#"{"id":-7}"#).as_deref(), Some("-7"));
        assert_eq!(id(br#"{"id":1.5}"#).as_deref(), Some("1.5"));
        assert_eq!(id(br#"{"id":2.0}"#).as_deref(), Some("2.0"));
        assert_eq!(id(br#"{"id":{"x":1}}"#), None);
        assert_eq!(id(br#"{"id":[1,"a"]}"#), None);
        assert_eq!(id(br#"{"id":null}"#), None);
        assert_eq!(id(br#"{"id":true}"#), None);
        assert_eq!(id(br#"{"n":1}"#), None);
        assert_eq!(
            id(br#"{"\u0069d":"escaped name"}"#).as_deref(),
            Some("escaped name")
        );
        assert_eq!(
            id(br#"{"id":"first","id":"last"}"#).as_deref(),
            Some("last")
        );
        assert_eq!(id(b"{\"\xff\":1,\"id\":\"x\"}").as_deref(), Some("x"));
        assert_eq!(id(b"{\"a\x01\":1,\"id\":\"x\"}").as_deref(), Some("x"));
        assert_eq!(id(b"{\"id\":\"\xff\"}"), None);
        assert_eq!(id(b"[1,2]"), None);
        assert_eq!(id(b"not json"), None);
        assert_eq!(id(br#"{"id":"a"} trailing"#), None);
    }

    /// A scalar, or a small object or array of scalars.
    fn value() -> impl Strategy<Value = Value> {
        let scalar = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e12..1e12f64).prop_map(Value::from),
            (-1000..1000i32).prop_map(|n| Value::from(f64::from(n))),
            "[a-z\"\\\\é0-9 ]{0,8}".prop_map(Value::from),
        ];
        scalar.prop_recursive(2, 8, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// The id read without decoding is the one a decoded payload holds.
        #[test]
        fn agrees_with_a_decoded_payload(fields in prop::collection::btree_map("(id|[a-z]{1,3})", value(), 0..5)) {
            let payload = serde_json::to_vec(&fields).unwrap_or_default();
            let decoded: Value = serde_json::from_slice(&payload).unwrap_or(Value::Null);
            let expected = match decoded.get("id") {
                Some(Value::String(text)) => Some(text.clone()),
                Some(Value::Number(number)) => Some(number.to_string()),
                _ => None,
            };
            prop_assert_eq!(id(&payload).as_deref().map(str::to_owned), expected.clone());
            // Parsed once, the same id, and the parse is the decoded payload.
            let (parsed_id, mut encoded) = parse(&payload);
            prop_assert_eq!(parsed_id.as_deref().map(str::to_owned), expected);
            prop_assert_eq!(encoded.take(), Some(decoded));
        }
    }

    #[test]
    fn only_a_json_object_is_kept_parsed() {
        for payload in [&b" \n{\"id\":7}"[..], br#"{"n":[1,{"id":2}]}"#] {
            let (_, mut encoded) = parse(payload);
            assert!(encoded.take().is_some(), "{payload:?}");
        }
        for payload in [
            &b"[1,2]"[..],
            b"\"text\"",
            b"12",
            b"not json",
            br#"{"id":"a"} trailing"#,
        ] {
            let (id, mut encoded) = parse(payload);
            assert_eq!((id, encoded.take()), (None, None), "{payload:?}");
        }
        // Not a `Value` (too deep for its parser; a name that is not
        // UTF-8), yet the `id` is the one read without a parse.
        let deep = format!(
            r#"{{"id":"deep","n":{}1{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        for payload in [deep.as_bytes(), b"{\"\xff\":1,\"id\":\"x\"}"] {
            let (parsed, mut encoded) = parse(payload);
            assert!(encoded.take().is_none());
            assert!(parsed.is_some());
            assert_eq!(parsed, id(payload));
        }
        assert_eq!(
            parse(br#"{"id":"first","id":"last"}"#).0.as_deref(),
            Some("last")
        );
    }

    #[test]
    fn an_object_that_is_not_json_text_has_no_id() {
        let payload = json!({"id": "x"}).to_string();
        assert_eq!(id(&payload.as_bytes()[..payload.len() - 1]), None);
    }
}
