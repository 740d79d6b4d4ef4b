//! Persistent per-key timers as a handler sees them: scheduled through the
//! context, staged per attempt, and written only when the attempt succeeds.

mod access;
mod due;

pub(crate) use access::{Notice, PartitionTimers};
pub(crate) use due::DueQueue;

use crate::clock::Timestamp;
use crate::key::Key;
use crate::store::StoreError;
use crate::store::timer::round_to_second;
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A timer operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum TimerError {
    /// This context has no timer store (a context built outside the runtime).
    #[error("timers are not available in this context")]
    Unavailable,
    /// The timer store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A change a handler made to its key's timers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TimerOp {
    Schedule(Timestamp),
    Unschedule(Timestamp),
    Clear,
}

/// A boxed future of the timer access (timer calls are off the hot path).
pub(crate) type TimerFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// What the runtime gives a context to reach its partition's timers.
pub(crate) trait TimerAccess: Send + Sync {
    /// The key's stored times, ascending.
    fn scheduled<'a>(&'a self, key: &'a Key) -> TimerFuture<'a, Vec<Timestamp>>;

    /// Writes the changes of a successful attempt, in order, and tells the
    /// partition.
    fn apply<'a>(&'a self, key: &'a Key, ops: Vec<TimerOp>) -> TimerFuture<'a, ()>;

    /// Removes a timer that fired and settled (the partition already let go
    /// of it).
    fn fired<'a>(&'a self, key: &'a Key, time: Timestamp) -> TimerFuture<'a, ()>;

    /// The partition's timers with `from <= time < until`, as (key, second).
    fn load(&self, from: Timestamp, until: Timestamp) -> TimerFuture<'_, Vec<(Key, i64)>>;
}

/// The timers of one handler attempt.
///
/// Invariant: changes are staged in the attempt's own list and reach the
/// store only through `Timers::commit`, which the handler service calls
/// after the handler succeeded; a failed attempt's list is dropped, so it
/// leaves no trace.
#[derive(Clone)]
pub struct Timers {
    access: Arc<dyn TimerAccess>,
    staged: Arc<Mutex<Vec<TimerOp>>>,
    /// Set once any attempt of this event committed; shared by the fresh
    /// copies of every attempt, so the runtime can tell whether a settled
    /// timer was already removed by its handler's commit.
    committed: Arc<AtomicBool>,
}

impl std::fmt::Debug for Timers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timers").finish_non_exhaustive()
    }
}

impl Timers {
    pub(crate) fn new(access: Arc<dyn TimerAccess>) -> Self {
        Self {
            access,
            staged: Arc::default(),
            committed: Arc::default(),
        }
    }

    /// The same timers with an empty staging list, for a new attempt.
    #[must_use]
    pub(crate) fn fresh(&self) -> Self {
        Self {
            access: Arc::clone(&self.access),
            staged: Arc::default(),
            committed: Arc::clone(&self.committed),
        }
    }

    /// Whether an attempt of this event committed its changes.
    pub(crate) fn committed(&self) -> bool {
        self.committed.load(Ordering::Acquire)
    }

    pub(crate) fn stage(&self, op: TimerOp) {
        self.staged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(op);
    }

    fn staged(&self) -> Vec<TimerOp> {
        self.staged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The key's times as the attempt sees them: stored, then staged.
    pub(crate) async fn scheduled(&self, key: &Key) -> Result<Vec<Timestamp>, TimerError> {
        let mut times: BTreeSet<Timestamp> =
            self.access.scheduled(key).await?.into_iter().collect();
        for op in self.staged() {
            match op {
                TimerOp::Schedule(time) => {
                    times.insert(time);
                }
                TimerOp::Unschedule(time) => {
                    times.remove(&time);
                }
                TimerOp::Clear => times.clear(),
            }
        }
        Ok(times.into_iter().collect())
    }

    /// Writes the staged changes; called once the attempt succeeded.
    pub(crate) async fn commit(&self, key: &Key) -> Result<(), StoreError> {
        let ops = std::mem::take(&mut *self.staged.lock().unwrap_or_else(PoisonError::into_inner));
        if !ops.is_empty() {
            self.access.apply(key, ops).await?;
        }
        self.committed.store(true, Ordering::Release);
        Ok(())
    }
}

/// Rounds a requested time to the second, as timers are stored.
pub(crate) fn rounded(time: Timestamp) -> Timestamp {
    round_to_second(time)
}
