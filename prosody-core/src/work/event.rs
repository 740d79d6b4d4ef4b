//! What every attempt of one event shares: one allocation for all of them.

use crate::store::TimerChange;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The share of one event's attempts in their unit of work: the timer
/// changes they staged and whether one began or completed its commit.
#[derive(Default)]
pub(super) struct EventWork {
    /// The timer changes the event's attempts staged, each under its
    /// attempt's number; a new attempt drops those of the earlier ones.
    staged: Mutex<Vec<(u32, TimerChange)>>,
    /// The number of the event's latest attempt.
    pub(super) attempts: AtomicU32,
    /// Set once an attempt began writing its changes: from then on the
    /// event's timers may already have changed in the store.
    pub(super) commit_started: AtomicBool,
    /// Set once an attempt committed its changes, so the runtime can tell
    /// whether a settled timer was already removed by its handler's commit.
    pub(super) committed: AtomicBool,
    /// Set when the latest attempt's handler succeeded (its commit may
    /// still wait on the stores); cleared when the scheduler arms it for
    /// the call it is about to make.
    pub(super) returned: AtomicBool,
}

impl std::fmt::Debug for EventWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventWork").finish_non_exhaustive()
    }
}

impl EventWork {
    /// The staged changes.
    pub(super) fn staged(&self) -> MutexGuard<'_, Vec<(u32, TimerChange)>> {
        lock(&self.staged)
    }
}

/// Locks `mutex`. Nothing panics while holding one of these, so a
/// poisoned lock holds a consistent value.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
