//! Persistent per-key timers: the changes a handler stages through its
//! context (written with the attempt's unit of work), and the timers a
//! partition holds and fires.

mod due;

pub(crate) use due::DueQueue;

use crate::clock::Timestamp;
use crate::key::Key;
use crate::store::StoreError;
use crate::store::timer::{TimerKind, round_to_second};
use std::sync::Arc;

/// A timer operation that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TimerError {
    /// This context has no timer store (a context built outside the runtime).
    #[error("timers are not available in this context")]
    Unavailable,
    /// The timer store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A timer of a partition as the runtime holds it: ordered by second, then
/// key, then kind, the order it fires in.
///
/// Invariant: a timer's identity is (second, key, kind); equality, order
/// and hash ignore `trace`, the span that scheduled it, which rides along.
#[derive(Clone, Debug)]
pub(crate) struct Due {
    pub(crate) second: i64,
    pub(crate) key: Key,
    pub(crate) kind: TimerKind,
    pub(crate) trace: Option<Arc<str>>,
}

impl Due {
    /// A timer with no trace.
    pub(crate) fn new(second: i64, key: Key, kind: TimerKind) -> Self {
        Self {
            second,
            key,
            kind,
            trace: None,
        }
    }

    fn identity(&self) -> (i64, &Key, TimerKind) {
        (self.second, &self.key, self.kind)
    }
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.identity().cmp(&other.identity())
    }
}

impl std::hash::Hash for Due {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

/// Rounds a requested time to the second, as timers are stored.
pub(crate) fn rounded(time: Timestamp) -> Timestamp {
    round_to_second(time)
}
