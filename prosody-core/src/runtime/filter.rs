//! Filters applied before the stack: a skipped record settles at once.

use crate::broker::Record;
use crate::event::SOURCE_SYSTEM_HEADER;
use serde::Deserialize;
use std::borrow::Cow;
use std::sync::Arc;

/// Why a record was skipped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Its `source-system` header names this consumer group: it is our own
    /// output coming back.
    OwnSource,
    /// Its payload's `type` matches none of the allowed prefixes.
    EventType,
}

/// The filters of one consumer.
///
/// Invariant: a record is skipped only for a reason in [`Skip`]; a record
/// without a `source-system` header, without a payload, or whose payload has
/// no string `type` field always passes.
#[derive(Clone, Debug)]
pub(crate) struct Filters {
    group_id: Arc<str>,
    allowed_events: Arc<[String]>,
}

#[derive(Deserialize)]
struct TypeField<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
}

impl Filters {
    pub(crate) fn new(group_id: Arc<str>, allowed_events: Arc<[String]>) -> Self {
        Self {
            group_id,
            allowed_events,
        }
    }

    /// Whether to skip a record, and why.
    pub(crate) fn check(&self, record: &Record) -> Option<Skip> {
        if record
            .headers
            .get(SOURCE_SYSTEM_HEADER)
            .is_some_and(|source| **source == *self.group_id.as_bytes())
        {
            return Some(Skip::OwnSource);
        }
        if self.allowed_events.is_empty() {
            return None;
        }
        let payload = record.payload.as_deref()?;
        let kind = serde_json::from_slice::<TypeField<'_>>(payload)
            .ok()?
            .kind?;
        let allowed = self
            .allowed_events
            .iter()
            .any(|prefix| kind.starts_with(prefix.as_str()));
        (!allowed).then_some(Skip::EventType)
    }
}

#[cfg(test)]
mod tests {
    use super::{Filters, Skip};
    use crate::broker::Record;
    use crate::clock::Timestamp;
    use crate::event::{Headers, SOURCE_SYSTEM_HEADER};
    use bytes::Bytes;
    use proptest::prelude::*;

    fn record(payload: Option<&str>, source: Option<&str>) -> Record {
        let mut headers = Headers::new();
        if let Some(source) = source {
            headers.push(SOURCE_SYSTEM_HEADER, source.as_bytes().to_vec());
        }
        Record {
            topic: "t".into(),
            partition: 0,
            offset: 0,
            timestamp: Timestamp::default(),
            key: Some(Bytes::from_static(b"k")),
            payload: payload.map(|p| Bytes::from(p.to_owned())),
            headers,
        }
    }

    fn filters(allowed: &[&str]) -> Filters {
        Filters::new(
            "group".into(),
            allowed.iter().map(|s| (*s).to_owned()).collect(),
        )
    }

    #[test]
    fn own_source_is_skipped_and_others_pass() {
        let f = filters(&[]);
        assert_eq!(
            f.check(&record(Some("{}"), Some("group"))),
            Some(Skip::OwnSource)
        );
        assert_eq!(f.check(&record(None, Some("group"))), Some(Skip::OwnSource));
        assert_eq!(f.check(&record(Some("{}"), Some("other"))), None);
        assert_eq!(f.check(&record(Some("{}"), None)), None);
    }

    proptest! {
        /// With prefixes set, a record passes exactly when its `type` starts
        /// with one of them, or when it has no string `type` at all.
        #[test]
        fn event_type_prefixes(kind in "[a-c]{0,3}(\\.[a-c]{1,2})?", typed in any::<bool>()) {
            let f = filters(&["a.", "b"]);
            let payload = if typed {
                serde_json::json!({"type": kind, "id": 1}).to_string()
            } else {
                serde_json::json!({"id": 1}).to_string()
            };
            let expected_skip = typed && !(kind.starts_with("a.") || kind.starts_with('b'));
            prop_assert_eq!(f.check(&record(Some(&payload), None)).is_some(), expected_skip);
        }
    }

    #[test]
    fn non_json_and_tombstones_pass_the_type_filter() {
        let f = filters(&["a."]);
        assert_eq!(f.check(&record(Some("not json"), None)), None);
        assert_eq!(f.check(&record(Some(r#"{"type": 5}"#), None)), None);
        assert_eq!(f.check(&record(None, None)), None);
    }
}
