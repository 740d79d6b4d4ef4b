//! Keyed state as the runtime keeps it: collection specifications, the
//! registry of a client's collections, and each attempt's pending changes.
//!
//! The typed collections (values, maps, deques of a serde type) are built
//! on this in `prosody-state`; here everything is bytes. A handler binds a
//! collection of its key with [`Context::state`](crate::Context::state);
//! what it writes is pending until the attempt succeeds, then lands in the
//! attempt's one [`Batch`](crate::store::Batch) with its timers, dedup
//! record and deferral changes, together with a marker that the record was
//! applied, so a redelivered record is not applied twice.

mod attempt;
mod error;
mod messages;
mod overlay;
mod reading;

pub(crate) use attempt::{AttemptState, Marker, StateGuard};
pub use attempt::{Page, Slot};
pub use error::{SpecError, StateError};
pub(crate) use messages::Reader;
pub use messages::message_cell;
pub use reading::Reading;

use crate::loader::Loader;
use crate::store::{StateStore, StoreError};
use std::time::Duration;

/// The collection name of each key's applied-record marker: no
/// collection can take it, since a collection's name is never empty.
pub(crate) const APPLIED: &str = "";

/// The largest `keyset_limit` of a map.
pub const MAX_KEYSET_LIMIT: u16 = 4096;

/// What a collection holds per key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// One value.
    Value,
    /// Values under string keys, in key order.
    Map,
    /// An ordered sequence, pushed and popped at both ends.
    Deque,
}

/// How a collection's items are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Payload {
    /// A serde type, as JSON.
    Json,
    /// A Kafka message, by its position in the log.
    Message,
}

/// How long a published collection's readers may serve a cached read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReadCache {
    /// The client's default.
    #[default]
    Inherit,
    /// Every read goes to the store.
    Disabled,
    /// Reads are cached this long; a zero duration is refused at
    /// `build()` (use `Disabled`).
    For(Duration),
}

/// A collection's specification: what a definition fixes.
///
/// Invariant: `name`, `kind` and `payload` are the collection's durable
/// identity; the store keeps the first identity seen for a name, and a
/// spec that differs from it cannot bind. The rest are runtime options,
/// checked by [`Registry::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Spec {
    /// The durable name.
    pub name: &'static str,
    /// What it holds.
    pub kind: Kind,
    /// How items are encoded.
    pub payload: Payload,
    /// How long a cell lives after its last write (`None`: until removed).
    pub ttl: Option<Duration>,
    /// Whether changes are written before the event is recorded complete
    /// (visible to a retry after a crash) rather than with it.
    pub read_uncommitted: bool,
    /// Maps: the ordered-scan bound (0 turns the tracking off).
    pub keyset_limit: u16,
    /// Deques: the most items kept, at least 1 (the oldest drop first).
    pub capacity: Option<u64>,
    /// Whether other groups may read it (JSON payloads only).
    pub published: bool,
    /// Published collections: how long readers cache.
    pub read_cache: ReadCache,
}

impl Spec {
    /// A spec with the default options.
    #[must_use]
    pub const fn new(name: &'static str, kind: Kind, payload: Payload) -> Self {
        Self {
            name,
            kind,
            payload,
            ttl: None,
            read_uncommitted: false,
            keyset_limit: 128,
            capacity: None,
            published: false,
            read_cache: ReadCache::Inherit,
        }
    }

    /// The durable identity, as the store records it: `kind/payload`.
    #[must_use]
    pub fn identity(&self) -> String {
        let kind = match self.kind {
            Kind::Value => "value",
            Kind::Map => "map",
            Kind::Deque => "deque",
        };
        let payload = match self.payload {
            Payload::Json => "json",
            Payload::Message => "message",
        };
        format!("{kind}/{payload}")
    }
}

/// A collection definition: a [`Spec`], and the typed handle a handler
/// binds it to. Implemented by `prosody-state`'s definitions.
pub trait Definition {
    /// The handle of one key's collection, for one attempt.
    type Handle<'a>;

    /// The collection's specification.
    fn spec(&self) -> &Spec;

    /// The handle over a bound slot.
    fn bind<'a>(&self, slot: Slot<'a>) -> Self::Handle<'a>;
}

/// The collections a client registered.
///
/// Invariant: names are non-empty and unique, and each spec's options
/// hold (checked by [`Registry::new`]); a spec binds only if it equals a
/// registered one whose identity the store confirmed.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    specs: Vec<Spec>,
    recovery_delay: Duration,
    /// How long an applied marker lives: the longest TTL of the specs, or
    /// for ever if one has none.
    marker_ttl: Option<Duration>,
    /// Names whose stored identity differs: (name, stored identity).
    mismatched: Vec<(&'static str, String)>,
    /// How message collections read their messages back.
    reader: Option<Reader>,
}

impl Registry {
    /// Checks `specs`: names non-empty and unique; a TTL in whole seconds,
    /// at least 1 s and longer than `recovery_delay`; a map's
    /// `keyset_limit` at most [`MAX_KEYSET_LIMIT`]; a deque's `capacity` at
    /// least 1; `published` only for JSON payloads.
    ///
    /// # Errors
    ///
    /// The first spec that breaks a rule, naming it and the rule.
    pub fn new(
        specs: impl IntoIterator<Item = Spec>,
        recovery_delay: Duration,
    ) -> Result<Self, SpecError> {
        let mut checked: Vec<Spec> = Vec::new();
        for spec in specs {
            error::check(&spec, recovery_delay)?;
            if checked.iter().any(|seen| seen.name == spec.name) {
                return Err(SpecError::new(spec.name, "is registered twice"));
            }
            checked.push(spec);
        }
        let marker_ttl = checked.iter().try_fold(Duration::ZERO, |longest, spec| {
            spec.ttl.map(|ttl| longest.max(ttl))
        });
        Ok(Self {
            specs: checked,
            recovery_delay,
            marker_ttl,
            mismatched: Vec::new(),
            reader: None,
        })
    }

    /// Message collections read their messages back with `loader` (the
    /// client's, so reads share its cache and deadline).
    pub fn read_messages_with(&mut self, loader: impl Loader) {
        self.reader = Some(Reader::new(loader));
    }

    pub(crate) fn reader(&self) -> Option<&Reader> {
        self.reader.as_ref()
    }

    /// How long an applied marker lives: the longest TTL of the
    /// collections, or for ever if one has none.
    pub(crate) fn marker_ttl(&self) -> Option<Duration> {
        self.marker_ttl
    }

    /// The recovery delay the specs were checked against.
    #[must_use]
    pub fn recovery_delay(&self) -> Duration {
        self.recovery_delay
    }

    /// The registered specs.
    #[must_use]
    pub fn specs(&self) -> &[Spec] {
        &self.specs
    }

    /// Whether no collection is registered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Records each collection's identity in `store`, or compares it with
    /// the recorded one; a collection whose recorded identity differs
    /// cannot bind.
    ///
    /// # Errors
    ///
    /// The store's, if it fails.
    pub async fn identify(&mut self, store: &impl StateStore) -> Result<(), StoreError> {
        self.mismatched.clear();
        for spec in &self.specs {
            let identity = spec.identity();
            let stored = store.identify(spec.name, &identity).await?;
            if stored != identity {
                tracing::error!(
                    collection = spec.name,
                    stored,
                    defined = identity,
                    "a state collection's definition differs from its stored kind or payload"
                );
                self.mismatched.push((spec.name, stored));
            }
        }
        Ok(())
    }

    /// `spec`, if it may bind.
    pub(crate) fn check(&self, spec: &Spec) -> Result<(), StateError> {
        if let Some((_, stored)) = self.mismatched.iter().find(|(name, _)| *name == spec.name) {
            return Err(StateError::Mismatch {
                collection: spec.name,
                stored: stored.clone(),
                defined: spec.identity(),
            });
        }
        if self.specs.contains(spec) {
            Ok(())
        } else {
            Err(StateError::Unregistered {
                collection: spec.name,
            })
        }
    }
}
