//! The fields the library reads from a JSON payload without decoding it:
//! its `id`, for deduplication.

use serde::Deserialize;
use std::borrow::Cow;
use std::sync::Arc;

#[derive(Deserialize)]
#[serde(untagged)]
enum IdValue<'a> {
    Text(#[serde(borrow)] Cow<'a, str>),
    Number(serde_json::Number),
}

#[derive(Deserialize)]
struct IdField<'a> {
    #[serde(borrow, default)]
    id: Option<IdValue<'a>>,
}

/// The payload's `id`: a string as it is, a number as its JSON text. `None`
/// when the payload is not a JSON object, has no `id`, or its `id` is of
/// another type.
pub(crate) fn id(payload: &[u8]) -> Option<Arc<str>> {
    match serde_json::from_slice::<IdField<'_>>(payload).ok()?.id? {
        IdValue::Text(text) => Some(Arc::from(text.as_ref())),
        IdValue::Number(number) => Some(Arc::from(number.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::id;

    #[test]
    fn reads_string_and_number_ids_only() {
        assert_eq!(id(br#"{"id":"a-1","n":2}"#).as_deref(), Some("a-1"));
        assert_eq!(id(br#"{"id":"esc\"aped"}"#).as_deref(), Some("esc\"aped"));
        assert_eq!(id(br#"{"n":1,"id":42}"#).as_deref(), Some("42"));
        assert_eq!(id(br#"{"id":{"x":1}}"#), None);
        assert_eq!(id(br#"{"n":1}"#), None);
        assert_eq!(id(b"[1,2]"), None);
        assert_eq!(id(b"not json"), None);
    }
}
