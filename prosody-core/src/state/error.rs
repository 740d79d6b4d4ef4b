//! What a keyed-state operation, or a collection's specification, can get
//! wrong.

use super::{Kind, MAX_KEYSET_LIMIT, Payload, ReadCache, Spec};
use crate::broker::TopicPartition;
use crate::error::{Category, HandlerError};
use crate::loader::LoadError;
use crate::store::StoreError;
use std::error::Error as StdError;
use std::time::Duration;

/// A keyed-state operation that failed.
///
/// Invariant: each error has one [category](StateError::category), which
/// it keeps through `?` into a [`HandlerError`]: a mistake the retry may
/// not repeat or a store outage is transient; a collection the client
/// cannot use is permanent; a store refusal is terminal (the partition
/// halts).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// A write of JSON `null`: clear or remove instead.
    #[error("state collection {collection}: JSON null cannot be stored; clear or remove instead")]
    NullValue {
        /// The collection.
        collection: &'static str,
    },
    /// A value did not encode, or a stored one did not decode.
    #[error("state collection {collection}: {source}")]
    Codec {
        /// The collection.
        collection: &'static str,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
    /// A stored cell is not what the collection writes.
    #[error("state collection {collection}: a stored cell is malformed: {reason}")]
    Malformed {
        /// The collection.
        collection: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The definition is not registered on this client.
    #[error("state collection {collection} is not registered (add it to `state_collections`)")]
    Unregistered {
        /// The collection.
        collection: &'static str,
    },
    /// The store keeps another kind or payload under this name.
    #[error(
        "state collection {collection} is stored as {stored} but defined as {defined}: \
         give the new definition another name"
    )]
    Mismatch {
        /// The collection.
        collection: &'static str,
        /// The stored identity.
        stored: String,
        /// The definition's identity.
        defined: String,
    },
    /// A handle was used after its attempt ended (a context kept past its
    /// handler).
    #[error("state collection {collection} was used after its attempt ended")]
    AttemptEnded {
        /// The collection.
        collection: &'static str,
    },
    /// A message collection names a record the log no longer holds
    /// (retention or compaction removed it): it will not come back.
    #[error(
        "state collection {collection}: the message at offset {offset} of {partition} is no \
         longer in the log (retention or compaction removed it)"
    )]
    MessageGone {
        /// The collection.
        collection: &'static str,
        /// The message's partition.
        partition: TopicPartition,
        /// The message's offset.
        offset: i64,
    },
    /// Reading a message collection's message back failed; it may succeed
    /// if tried again.
    #[error("state collection {collection}: {source}")]
    MessageRead {
        /// The collection.
        collection: &'static str,
        /// The loader's error.
        #[source]
        source: LoadError,
    },
    /// A message collection was read where the runtime has no way to read
    /// messages back (a runtime built without a loader).
    #[error("state collection {collection} holds messages, and this runtime reads none back")]
    Unreadable {
        /// The collection.
        collection: &'static str,
    },
    /// The context was not made by the runtime, or the client registered
    /// no collections.
    #[error("keyed state is not available in this context")]
    Unavailable,
    /// A definition breaks a rule of its own (a reader checks it before
    /// its first read).
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A published collection's reader found it no longer published (its
    /// owners retired it), or published as another kind: it reads nothing
    /// rather than stale or foreign cells.
    #[error("state collection {collection}: {reason}")]
    Unpublished {
        /// The collection.
        collection: &'static str,
        /// What its publication says.
        reason: String,
    },
}

impl StateError {
    /// The error's category.
    #[must_use]
    pub fn category(&self) -> Category {
        match self {
            Self::NullValue { .. }
            | Self::Codec { .. }
            | Self::Malformed { .. }
            | Self::MessageRead { .. } => Category::Transient,
            Self::Store(store) if store.is_retriable() => Category::Transient,
            Self::Store(_) => Category::Terminal,
            Self::Unregistered { .. }
            | Self::Mismatch { .. }
            | Self::AttemptEnded { .. }
            | Self::MessageGone { .. }
            | Self::Unreadable { .. }
            | Self::Unavailable
            | Self::Spec(_)
            | Self::Unpublished { .. } => Category::Permanent,
        }
    }

    /// The error as a handler error of its category.
    #[must_use]
    pub fn into_handler(self) -> HandlerError {
        HandlerError::new(self.category(), self)
    }
}

/// Any standard error converts with `?` as a transient error (until the
/// handler's [`classify`](crate::EventHandler::classify) says otherwise),
/// but for a [`StateError`], which keeps its own category.
impl<E: StdError + Send + Sync + 'static> From<E> for HandlerError {
    fn from(error: E) -> Self {
        let any: &dyn std::any::Any = &error;
        match any.downcast_ref::<StateError>() {
            Some(state) => Self::new(state.category(), error),
            None => Self::assumed(Box::new(error)),
        }
    }
}

/// A collection specification that breaks a rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("state collection {collection:?} {reason}")]
pub struct SpecError {
    /// The collection.
    pub collection: &'static str,
    /// The rule it breaks.
    pub reason: String,
}

impl SpecError {
    pub(crate) fn new(collection: &'static str, reason: impl Into<String>) -> Self {
        Self {
            collection,
            reason: reason.into(),
        }
    }
}

/// Checks one spec's own rules.
pub(crate) fn check(spec: &Spec, recovery_delay: Duration) -> Result<(), SpecError> {
    let fail = |reason: String| Err(SpecError::new(spec.name, reason));
    if spec.name.is_empty() {
        return fail("has an empty name".into());
    }
    if let Some(ttl) = spec.ttl {
        if ttl.subsec_nanos() != 0 || ttl < Duration::from_secs(1) {
            return fail(format!("ttl {ttl:?} must be whole seconds, at least 1s"));
        }
        if ttl <= recovery_delay {
            return fail(format!(
                "ttl {ttl:?} must be longer than state_recovery_delay ({recovery_delay:?})"
            ));
        }
    }
    if spec.kind == Kind::Map && spec.keyset_limit > MAX_KEYSET_LIMIT {
        return fail(format!(
            "keyset_limit {} is above {MAX_KEYSET_LIMIT}",
            spec.keyset_limit
        ));
    }
    if spec.kind == Kind::Deque && spec.capacity == Some(0) {
        return fail("capacity 0 must be at least 1".into());
    }
    if spec.read_cache == ReadCache::For(Duration::ZERO) {
        return fail(
            "read_cache For(0s) must be positive; ReadCache::Disabled reads the store every time"
                .into(),
        );
    }
    if spec.published && spec.payload != Payload::Json {
        return fail("is published, which only JSON payloads may be".into());
    }
    Ok(())
}
