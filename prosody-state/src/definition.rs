//! Collection definitions: a durable name, a kind, a payload (a serde
//! type as JSON, or Kafka messages), and the options of each kind.

use crate::codec::{Json, Messages};
use crate::{DequeState, MapState, ValueState};
use prosody_core::Message;
use prosody_core::state::{Definition, Kind, Payload, ReadCache, Slot, Spec};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;
use std::time::Duration;

macro_rules! definition {
    ($(#[$doc:meta])* $name:ident, $kind:expr, $payload:expr) => {
        $(#[$doc])*
        #[derive(Debug)]
        #[must_use]
        pub struct $name<T> {
            spec: Spec,
            _items: PhantomData<fn() -> T>,
        }

        impl<T> $name<T> {
            /// A collection named `name` (its durable name: the store keeps
            /// its kind and payload under it).
            pub const fn new(name: &'static str) -> Self {
                Self {
                    spec: Spec::new(name, $kind, $payload),
                    _items: PhantomData,
                }
            }

            /// Cells expire `ttl` after their last write: whole seconds, at
            /// least 1 s, longer than `state_recovery_delay` (checked when
            /// the client is built).
            pub const fn ttl(mut self, ttl: Duration) -> Self {
                self.spec.ttl = Some(ttl);
                self
            }

            /// Writes the changes before the event is recorded complete
            /// instead of with it: a crash in between lets the retry see
            /// them, so they must be idempotent. Default `false`.
            pub const fn read_uncommitted(mut self, on: bool) -> Self {
                self.spec.read_uncommitted = on;
                self
            }

            /// The specification, to register on the client.
            pub const fn spec(&self) -> Spec {
                self.spec
            }
        }
    };
}

/// `published` and `read_cache`: JSON collections only, so a message
/// collection cannot be published.
macro_rules! publishable {
    ($($name:ident),*) => {$(
        impl<T> $name<T> {
            /// Lets other groups read the collection. Default `false`.
            pub const fn published(mut self, on: bool) -> Self {
                self.spec.published = on;
                self
            }

            /// How long readers of a published collection cache a read.
            pub const fn read_cache(mut self, cache: ReadCache) -> Self {
                self.spec.read_cache = cache;
                self
            }
        }
    )*};
}

macro_rules! map_options {
    ($($name:ident),*) => {$(
        impl<T> $name<T> {
            /// The ordered-scan bound: `0..=4096`, default 128, 0 turns the
            /// tracking off. Every backend here keeps a map's entries in
            /// key order at any size, so scans are ordered whatever the
            /// bound; it is checked and kept for backends that need it.
            pub const fn keyset_limit(mut self, limit: u16) -> Self {
                self.spec.keyset_limit = limit;
                self
            }
        }
    )*};
}

macro_rules! deque_options {
    ($($name:ident),*) => {$(
        impl<T> $name<T> {
            /// Keeps at most `capacity` items, at least 1 (checked when the
            /// client is built): a push past it drops the item at the other
            /// end (the oldest, for pushes at one end). Not stored: a deque
            /// that held more keeps its items until the next push trims it.
            pub const fn capacity(mut self, capacity: u64) -> Self {
                self.spec.capacity = Some(capacity);
                self
            }
        }
    )*};
}

macro_rules! binds {
    ($name:ident, $handle:ident, $item:ty, $encoding:ty, $($bound:tt)+) => {
        impl<T: $($bound)+> Definition for $name<T> {
            type Handle<'a> = $handle<'a, $item, $encoding>;

            fn spec(&self) -> &Spec {
                &self.spec
            }

            fn bind<'a>(&self, slot: Slot<'a>) -> Self::Handle<'a> {
                $handle::new(slot)
            }
        }
    };
}

definition!(
    /// One value of `T` per key, stored as JSON.
    ///
    /// ```
    /// use prosody_state::ValueDef;
    /// use std::time::Duration;
    ///
    /// /// The last login per user, forgotten after 90 days without one.
    /// static LAST_LOGIN: ValueDef<i64> = ValueDef::new("last_login").ttl(Duration::from_secs(90 * 86_400));
    ///
    /// assert_eq!(LAST_LOGIN.spec().ttl, Some(Duration::from_secs(90 * 86_400)));
    /// ```
    ValueDef,
    Kind::Value,
    Payload::Json
);
definition!(
    /// Values of `T` under string keys, per key, in key order, stored as
    /// JSON.
    ///
    /// ```
    /// use prosody_state::MapDef;
    ///
    /// /// Per customer, the quantity of each product in the basket.
    /// static BASKET: MapDef<u32> = MapDef::new("basket").keyset_limit(512);
    ///
    /// assert_eq!(BASKET.spec().keyset_limit, 512);
    /// ```
    MapDef,
    Kind::Map,
    Payload::Json
);
definition!(
    /// A sequence of `T` per key, pushed and popped at both ends, stored
    /// as JSON.
    ///
    /// ```
    /// use prosody_state::DequeDef;
    ///
    /// /// Per device, its last 20 readings; a 21st push drops the oldest.
    /// static READINGS: DequeDef<f64> = DequeDef::new("readings").capacity(20);
    ///
    /// assert_eq!(READINGS.spec().capacity, Some(20));
    /// ```
    DequeDef,
    Kind::Deque,
    Payload::Json
);
definition!(
    /// One Kafka message per key, whose payload decodes (as JSON) to `P`.
    ///
    /// The store keeps the message's position, and a read brings it back
    /// from the log, so the log must still hold it: a message that
    /// retention or compaction removed reads as
    /// [`StateError::MessageGone`](crate::StateError::MessageGone).
    MessageValueDef,
    Kind::Value,
    Payload::Message
);
definition!(
    /// Kafka messages under string keys, per key, in key order, whose
    /// payloads decode (as JSON) to `P`. Kept by position, like
    /// [`MessageValueDef`].
    MessageMapDef,
    Kind::Map,
    Payload::Message
);
definition!(
    /// A sequence of Kafka messages per key, whose payloads decode (as
    /// JSON) to `P`. Kept by position, like [`MessageValueDef`].
    MessageDequeDef,
    Kind::Deque,
    Payload::Message
);

publishable!(ValueDef, MapDef, DequeDef);
map_options!(MapDef, MessageMapDef);
deque_options!(DequeDef, MessageDequeDef);

binds!(
    ValueDef,
    ValueState,
    T,
    Json,
    Serialize + DeserializeOwned + Send + Sync + 'static
);
binds!(
    MapDef,
    MapState,
    T,
    Json,
    Serialize + DeserializeOwned + Send + Sync + 'static
);
binds!(
    DequeDef,
    DequeState,
    T,
    Json,
    Serialize + DeserializeOwned + Send + Sync + 'static
);
binds!(
    MessageValueDef,
    ValueState,
    Message<T>,
    Messages,
    DeserializeOwned + Send + Sync + 'static
);
binds!(
    MessageMapDef,
    MapState,
    Message<T>,
    Messages,
    DeserializeOwned + Send + Sync + 'static
);
binds!(
    MessageDequeDef,
    DequeState,
    Message<T>,
    Messages,
    DeserializeOwned + Send + Sync + 'static
);
