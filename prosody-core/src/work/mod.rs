//! The attempt's unit of work: everything one handler attempt changes,
//! collected while it runs and committed once, after it succeeded.

mod commit;
mod event;
#[cfg(test)]
mod tests;

pub use commit::ReturnedLate;
pub(crate) use commit::{finish, late_success};

use crate::access::PartitionStores;
use crate::clock::Timestamp;
use crate::key::Key;
use crate::state::{AttemptState, Marker};
use crate::store::TimerChange;
use crate::store::timer::TimerKind;
use crate::store::{Batch, DedupWrite, DeferWrite, StoreError};
use crate::timers::TimerError;
use event::EventWork;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A write a stage adds to an attempt's batch, to land only if the attempt
/// succeeds: the dedup record of its message, or the completion of the
/// deferred head it retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Rider {
    Dedup(DedupWrite),
    Defer(DeferWrite),
}

/// Whether the handler of the call a stage is making succeeded: cleared
/// when the stage arms it ([`UnitOfWork::returned`]) before the call, set
/// by the handler service when the handler succeeds, before
/// the attempt's commit. The scheduler gives back its permit then, so a
/// commit waiting on the stores holds no handler slot.
#[derive(Clone, Debug)]
pub(crate) struct Returned(Arc<EventWork>);

impl Returned {
    /// Whether the handler of the armed call succeeded.
    pub(crate) fn get(&self) -> bool {
        self.0.returned.load(Ordering::Acquire)
    }
}

/// The unit of work of one handler attempt: its timer changes, its keyed
/// state writes and the riders of the stages around it (a dedup record, a
/// deferred head's completion), staged and committed once; nothing else.
///
/// Invariant: an attempt's changes reach the store only through its one
/// [`commit`](UnitOfWork::commit), made after its handler succeeded
/// within its deadline and before its success is returned, so they are
/// durable before the offset the success settles is committed. A failed
/// attempt leaves no trace: its state is sealed unwritten, and its timer
/// changes (staged under its own number in the event's shared list) are
/// dropped when the next attempt [begins](UnitOfWork::begin) and never
/// written by it; only a commit cut short (a store failure partway, which
/// `commit_started` records) may have landed in part. The event's share
/// is one allocation for all its attempts. The defer stage writes its own
/// batches (its [`TimerKind::Defer`] timers and offsets) directly, with
/// [`UnitOfWork::write`].
#[derive(Clone)]
pub(crate) struct UnitOfWork {
    access: Arc<PartitionStores>,
    /// Shared by every attempt of the event.
    event: Arc<EventWork>,
    /// The number of the attempt this unit stages for.
    attempt: u32,
    /// What the attempt's success marks applied in its key's state.
    marker: Option<Marker>,
    /// The key's keyed state, if the client registered collections.
    state: Option<Arc<AttemptState>>,
}

impl std::fmt::Debug for UnitOfWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnitOfWork")
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl UnitOfWork {
    /// The unit of an event's attempts over a partition's stores.
    pub(crate) fn new(access: Arc<PartitionStores>) -> Self {
        Self {
            access,
            event: Arc::default(),
            attempt: 0,
            marker: None,
            state: None,
        }
    }

    /// The same unit with its key's state.
    #[must_use]
    pub(crate) fn with_state(mut self, state: Arc<AttemptState>) -> Self {
        self.state = Some(state);
        self
    }

    /// The key's state as this attempt sees it.
    pub(crate) fn state(&self) -> Option<&AttemptState> {
        self.state.as_deref()
    }

    /// The same unit for a new attempt: nothing staged or pending, and
    /// what earlier attempts staged dropped.
    #[must_use]
    fn fresh(&self) -> Self {
        let attempt = self
            .event
            .attempts
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1);
        self.event
            .staged()
            .retain(|(staged_by, _)| *staged_by == attempt);
        Self {
            access: Arc::clone(&self.access),
            event: Arc::clone(&self.event),
            attempt,
            marker: self.marker,
            state: self.state.as_deref().map(AttemptState::fresh),
        }
    }

    /// The unit of another event of the key: nothing staged, not
    /// committed; its state begins afresh with its attempt.
    #[must_use]
    pub(crate) fn detached(&self) -> Self {
        Self {
            state: self.state.clone(),
            ..Self::new(Arc::clone(&self.access))
        }
    }

    /// Marks that this attempt's handler succeeded: what remains is its
    /// commit, which is the stores' work, not the handler's.
    pub(crate) fn handler_returned(&self) {
        self.event.returned.store(true, Ordering::Release);
    }

    /// Tells a stage above the handler when the handler of the call it is
    /// about to make succeeded (see [`Returned`]); until then, `false`.
    pub(crate) fn returned(&self) -> Returned {
        self.event.returned.store(false, Ordering::Release);
        Returned(Arc::clone(&self.event))
    }

    /// Whether an attempt of this event began writing its changes (so the
    /// store may hold part of them).
    pub(crate) fn commit_started(&self) -> bool {
        self.event.commit_started.load(Ordering::Acquire)
    }

    /// Whether an attempt of this event committed its changes.
    pub(crate) fn committed(&self) -> bool {
        self.event.committed.load(Ordering::Acquire)
    }

    /// The partition's stores, for the stages' reads: the same stores its
    /// commit writes to, so a stage reads what the attempts wrote.
    pub(crate) fn stores(&self) -> &Arc<PartitionStores> {
        &self.access
    }

    /// Writes a batch now, unstaged.
    pub(crate) async fn write(&self, batch: Batch) -> Result<(), StoreError> {
        match self.access.commit_now(batch) {
            Ok(written) => written,
            // Boxed: the stores' commit waits on I/O and boxes its own call
            // anyway, and its state (hundreds of bytes) would otherwise sit
            // in every handler call's future, through the commit.
            Err(batch) => Box::pin(self.access.commit(batch)).await,
        }
    }

    /// Stages a change of the key's application timers.
    pub(crate) fn stage(&self, op: TimerChange) {
        self.event.staged().push((self.attempt, op));
    }

    /// What this attempt staged, in order.
    fn staged(&self) -> Vec<TimerChange> {
        self.event
            .staged()
            .iter()
            .filter(|(staged_by, _)| *staged_by == self.attempt)
            .map(|(_, op)| op.clone())
            .collect()
    }

    /// The key's times as the attempt sees them: stored, then staged.
    pub(crate) async fn scheduled(&self, key: &Key) -> Result<Vec<Timestamp>, TimerError> {
        let mut times: BTreeSet<Timestamp> = self
            .access
            .scheduled(key, TimerKind::Application)
            .await?
            .into_iter()
            .collect();
        for op in self.staged() {
            match op {
                TimerChange::Schedule { time, .. } => {
                    times.insert(time);
                }
                TimerChange::Unschedule { time } => {
                    times.remove(&time);
                }
                TimerChange::Clear => times.clear(),
            }
        }
        Ok(times.into_iter().collect())
    }
}
