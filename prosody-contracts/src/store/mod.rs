//! Store contracts: what a layer keeps outside the process, so it survives a
//! restart and is shared by every member of a group.
//!
//! Each store is a trait whose async methods return `impl Future + Send`
//! (no `async-trait`); backends (memory, Cassandra) implement it and run its
//! one conformance suite, in `prosody-conformance`.
//!
//! # Batches
//!
//! The store traits hold only reads; every write goes through
//! [`Stores::commit`]. A handler's attempt reads the stores as it goes but
//! writes nothing until it succeeds. Its changes (timers, keyed state, the defer stage's
//! bookkeeping, the dedup record of its message) gather in one [`Batch`],
//! which [`Stores::commit`] writes for the attempt's partition, each
//! store's writes in order. A failed attempt drops its batch. Every write
//! but [`DeferWrite::Failed`] is idempotent, so a batch whose commit failed
//! partway may be written again whole.
//!
//! ```
//! use prosody_contracts::store::{Batch, DeferWrite, Deferral, TimerChange, TimerKind};
//! use prosody_contracts::{Key, Timestamp};
//!
//! let key = Key::from("order-7");
//! let batch = Batch::default()
//!     .timer(&key, TimerKind::Application, TimerChange::Clear)
//!     .timer(&key, TimerKind::Application, TimerChange::Schedule {
//!         time: Timestamp::from_millis(1_700_000_060_000),
//!         trace: None,
//!     })
//!     .deferral(DeferWrite::Defer { key: key.clone(), offset: 41, deferral: Deferral::AfterFailure });
//! // The clear lands before the schedule, so the key keeps one timer.
//! assert_eq!(batch.len(), 3);
//! assert!(!batch.is_empty() && batch.state.is_empty());
//! ```
//!
//! `prosody-memory`'s `MemoryStores` shows a commit read back.

mod batch;
pub mod dedup;
pub mod defer;
pub mod directory;
mod erase;
pub mod state;
pub mod timer;
mod wrap;

pub use batch::{Batch, DedupWrite, DeferWrite, Stores, TimerChange, TimerWrite};
pub use dedup::{DedupKey, DedupStore};
pub use defer::{DeferCounts, DeferStore, Deferral, Deferred};
pub use directory::PeerDirectory;
pub use erase::AnyStores;
pub use state::{Direction, ItemRange, StateChange, StateStore, StateWrite};
pub use timer::{TimerEntry, TimerKind, TimerStore};
pub use wrap::Wrapped;

use crate::error::{BoxError, Category};

/// A store operation that failed.
///
/// Invariant: every error is either retriable ([`StoreError::Unavailable`]:
/// the same call may succeed later) or not ([`StoreError::Rejected`]: it
/// will fail the same way again); [`StoreError::is_retriable`] tells which.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached, was overloaded or timed out.
    #[error("store unavailable: {0}")]
    Unavailable(#[source] BoxError),
    /// The store refused the operation (invalid data, schema mismatch,
    /// permissions).
    #[error("store rejected the operation: {0}")]
    Rejected(#[source] BoxError),
}

impl StoreError {
    /// A retriable error.
    pub fn unavailable(source: impl Into<BoxError>) -> Self {
        Self::Unavailable(source.into())
    }

    /// An error that trying again does not fix.
    pub fn rejected(source: impl Into<BoxError>) -> Self {
        Self::Rejected(source.into())
    }

    /// Whether the same call may succeed if tried again.
    #[must_use]
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }

    /// The category of an attempt that met this error: an unavailable
    /// store is transient (the mode tries again), a refusal terminal (the
    /// partition halts with this cause, and liveness names it, rather than
    /// retry forever in silence).
    #[must_use]
    pub fn category(&self) -> Category {
        if self.is_retriable() {
            Category::Transient
        } else {
            Category::Terminal
        }
    }
}
