//! Collection definitions: a durable name, a kind, a serde type, and the
//! options of each kind.

use crate::{DequeState, MapState, ValueState};
use prosody_core::state::{Definition, Kind, Payload, ReadCache, Slot, Spec};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;
use std::time::Duration;

macro_rules! definition {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
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
                    spec: Spec::new(name, $kind, Payload::Json),
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

            /// The specification, to register on the client.
            pub const fn spec(&self) -> Spec {
                self.spec
            }
        }
    };
}

definition!(
    /// One value of `T` per key.
    ValueDef,
    Kind::Value
);
definition!(
    /// Values of `T` under string keys, per key, in key order.
    MapDef,
    Kind::Map
);
definition!(
    /// A sequence of `T` per key, pushed and popped at both ends.
    DequeDef,
    Kind::Deque
);

impl<T> MapDef<T> {
    /// The ordered-scan bound: `0..=4096`, default 128, 0 turns the
    /// tracking off. Every backend here keeps a map's entries in key
    /// order at any size, so scans are ordered whatever the bound; it is
    /// checked and kept for backends that need it.
    pub const fn keyset_limit(mut self, limit: u16) -> Self {
        self.spec.keyset_limit = limit;
        self
    }
}

impl<T> DequeDef<T> {
    /// Keeps at most `capacity` items, at least 1 (checked when the
    /// client is built): a push past it drops the item at the other end
    /// (the oldest, for pushes at one end). Not stored: a deque that held
    /// more keeps its items until the next push trims it.
    pub const fn capacity(mut self, capacity: u64) -> Self {
        self.spec.capacity = Some(capacity);
        self
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Definition for ValueDef<T> {
    type Handle<'a> = ValueState<'a, T>;

    fn spec(&self) -> &Spec {
        &self.spec
    }

    fn bind<'a>(&self, slot: Slot<'a>) -> ValueState<'a, T> {
        ValueState::new(slot)
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Definition for MapDef<T> {
    type Handle<'a> = MapState<'a, T>;

    fn spec(&self) -> &Spec {
        &self.spec
    }

    fn bind<'a>(&self, slot: Slot<'a>) -> MapState<'a, T> {
        MapState::new(slot)
    }
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Definition for DequeDef<T> {
    type Handle<'a> = DequeState<'a, T>;

    fn spec(&self) -> &Spec {
        &self.spec
    }

    fn bind<'a>(&self, slot: Slot<'a>) -> DequeState<'a, T> {
        DequeState::new(slot)
    }
}
