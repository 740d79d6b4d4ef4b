//! A keyed-state collection known by its object form.

use prosody::state::{DequeDef, Kind, MapDef, MessageDequeDef, MessageMapDef, MessageValueDef};
use prosody::state::{Payload, Spec, ValueDef};
use serde_json::Value;

/// A collection of JSON values or Kafka messages, as a binding declares
/// it: built from [`Spec`] through the public definitions, so it binds
/// exactly where the equal definition written in Rust would.
#[derive(Debug)]
pub enum Collection {
    /// One JSON value per key.
    Value(ValueDef<Value>),
    /// JSON values under string keys.
    Map(MapDef<Value>),
    /// A sequence of JSON values.
    Deque(DequeDef<Value>),
    /// One Kafka message per key.
    MessageValue(MessageValueDef<Value>),
    /// Kafka messages under string keys.
    MessageMap(MessageMapDef<Value>),
    /// A sequence of Kafka messages.
    MessageDeque(MessageDequeDef<Value>),
}

macro_rules! with_options {
    ($def:expr, $spec:ident $(, $extra:ident)*) => {{
        let def = $def.read_uncommitted($spec.read_uncommitted);
        let def = match $spec.ttl {
            Some(ttl) => def.ttl(ttl),
            None => def,
        };
        $(let def = with_options!(@$extra def, $spec);)*
        def
    }};
    (@published $def:ident, $spec:ident) => {
        $def.published($spec.published).read_cache($spec.read_cache)
    };
    (@keyset $def:ident, $spec:ident) => {
        $def.keyset_limit($spec.keyset_limit)
    };
    (@capacity $def:ident, $spec:ident) => {
        match $spec.capacity {
            Some(capacity) => $def.capacity(capacity),
            None => $def,
        }
    };
}

impl Collection {
    /// The collection `spec` describes.
    #[must_use]
    pub fn new(spec: Spec) -> Self {
        let name = spec.name;
        match (spec.kind, spec.payload) {
            (Kind::Value, Payload::Json) => {
                Self::Value(with_options!(ValueDef::new(name), spec, published))
            }
            (Kind::Map, Payload::Json) => {
                Self::Map(with_options!(MapDef::new(name), spec, published, keyset))
            }
            (Kind::Deque, Payload::Json) => Self::Deque(with_options!(
                DequeDef::new(name),
                spec,
                published,
                capacity
            )),
            (Kind::Value, Payload::Message) => {
                Self::MessageValue(with_options!(MessageValueDef::new(name), spec))
            }
            (Kind::Map, Payload::Message) => {
                Self::MessageMap(with_options!(MessageMapDef::new(name), spec, keyset))
            }
            (Kind::Deque, Payload::Message) => {
                Self::MessageDeque(with_options!(MessageDequeDef::new(name), spec, capacity))
            }
        }
    }

    /// The collection of an object form (see
    /// [`ClientBuilder::option`](prosody::ClientBuilder::option)).
    ///
    /// # Errors
    ///
    /// A message naming the field that is missing or wrong.
    pub fn from_json(value: &Value) -> Result<Self, String> {
        prosody::state_spec(value).map(Self::new)
    }

    /// Its specification.
    #[must_use]
    pub fn spec(&self) -> Spec {
        match self {
            Self::Value(def) => def.spec(),
            Self::Map(def) => def.spec(),
            Self::Deque(def) => def.spec(),
            Self::MessageValue(def) => def.spec(),
            Self::MessageMap(def) => def.spec(),
            Self::MessageDeque(def) => def.spec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Collection;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn the_object_form_keeps_every_option() {
        let collection = Collection::from_json(&json!({
            "name": "pending", "kind": "deque", "payload": "json",
            "ttl": 86400, "capacity": 100, "published": true, "read_cache": false,
        }));
        let spec = collection.map(|c| c.spec());
        let spec = spec.as_ref().map_err(String::as_str);
        assert_eq!(spec.map(|s| s.ttl), Ok(Some(Duration::from_secs(86_400))));
        assert_eq!(spec.map(|s| s.capacity), Ok(Some(100)));
        assert_eq!(spec.map(|s| s.published), Ok(true));
        assert!(Collection::from_json(&json!({"kind": "value"})).is_err());
        assert!(Collection::from_json(&json!({"name": "x", "kind": "list"})).is_err());
    }
}
