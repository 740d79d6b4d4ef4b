//! The commit of an attempt's unit of work, and the late-success rule:
//! the one place that decides whether, and when, an attempt's changes
//! land.

use super::{Rider, UnitOfWork};
use crate::error::HandlerError;
use crate::event::Event;
use crate::key::Key;
use crate::state::{Marker, StateGuard};
use crate::store::Batch;
use crate::store::TimerChange;
use crate::store::timer::TimerKind;
use std::sync::atomic::Ordering;
use tokio::time::Instant;

/// A handler returned after its deadline had passed: whatever it did is
/// discarded and the event is tried again.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the handler returned after its deadline; its result and changes are discarded")]
pub struct ReturnedLate;

/// The late-success rule: a success that comes back past its attempt's
/// deadline counts only if its unit of work was committed (then its
/// changes landed, within the deadline, and it must not run again);
/// otherwise it is a transient [`ReturnedLate`], and nothing of it is
/// written. A success in time, and any error, are what they are.
///
/// The handler service asks before it commits (nothing committed yet);
/// the timeout stage asks when the attempt returns, with the event's
/// committed flag.
pub(crate) fn late_success<R>(
    result: Result<R, HandlerError>,
    past_deadline: bool,
    committed: bool,
) -> Result<R, HandlerError> {
    match result {
        Ok(_) if past_deadline && !committed => Err(HandlerError::transient(ReturnedLate)),
        result => result,
    }
}

/// Finishes a handler's success: commits its unit of work (if the runtime
/// gave it one) unless the late-success rule discards it, and returns the
/// output once the commit is durable.
pub(crate) async fn finish<R>(
    work: Option<&UnitOfWork>,
    key: &Key,
    riders: &[Rider],
    deadline: Option<Instant>,
    output: R,
) -> Result<R, HandlerError> {
    let past_deadline = deadline.is_some_and(|at| Instant::now() >= at);
    // This attempt has committed nothing yet.
    let output = late_success(Ok(output), past_deadline, false)?;
    if let Some(work) = work {
        work.commit(key, riders).await?;
    }
    Ok(output)
}

impl UnitOfWork {
    /// The unit of the next attempt at `event`: nothing staged or pending,
    /// what earlier attempts staged dropped, and, for a firing application
    /// timer, its removal staged first, so it leaves the store in the same
    /// commit as the handler's own changes (a handler that schedules the
    /// same second again keeps that new timer).
    #[must_use]
    pub(crate) fn begin<P>(&self, event: &Event<P>) -> Self {
        let mut work = self.fresh();
        work.marker = match event {
            Event::Message(message) => Some(Marker::Record(message.offset)),
            Event::Excise(excise) => Some(Marker::Record(excise.offset)),
            Event::Timer(timer) => Some(Marker::Timer(timer.time.as_millis())),
        };
        if let Event::Timer(timer) = event
            && timer.kind == TimerKind::Application
        {
            work.stage(TimerChange::Unschedule { time: timer.time });
        }
        work
    }

    /// Whether the key's state marks the attempt's event applied: its
    /// changes landed already (before a crash or a hand-off kept its
    /// offset from being committed, or in an earlier attempt's commit that
    /// failed as far as it knew), so it must not run again.
    pub(crate) async fn applied(&self) -> Result<bool, HandlerError> {
        if !self.may_have_applied() {
            return Ok(false);
        }
        let (Some(state), Some(event)) = (&self.state, self.marker) else {
            return Ok(false);
        };
        if matches!(event, Marker::Timer(_)) && !self.commit_started() {
            // No attempt of this timer wrote anything.
            return Ok(false);
        }
        let applied = state.applied(event).await?;
        Ok(match event {
            Marker::Record(at) => applied.is_some_and(|applied| applied >= at),
            Marker::Timer(at) => applied == Some(at),
        })
    }

    /// Whether [`applied`](Self::applied) has anything to ask the store:
    /// only an attempt with keyed state whose event leaves a marker. The
    /// handler service asks it first, so the common attempt carries no
    /// state read in its future.
    pub(crate) fn may_have_applied(&self) -> bool {
        self.state.is_some() && self.marker.is_some()
    }

    /// Seals the attempt's state when dropped: however its call ends (an
    /// error, a panic, a deadline), nothing pending is written later.
    pub(crate) fn seal_on_drop(&self) -> StateGuard {
        StateGuard(self.state.clone())
    }

    /// Writes everything the attempt changed: its `read_uncommitted`
    /// state first, then one batch of its timer changes, its other state
    /// writes with the marker of its event, and the `riders`; called once,
    /// after its handler succeeded.
    pub(crate) async fn commit(&self, key: &Key, riders: &[Rider]) -> Result<(), HandlerError> {
        let mut state = Vec::new();
        if let Some(attempt) = &self.state {
            let mut sealed = attempt.seal();
            let markers = self
                .marker
                .filter(|_| sealed.wrote)
                .map(|event| attempt.markers(event, &sealed))
                .unwrap_or_default();
            if !sealed.uncommitted.is_empty() {
                let batch = Batch {
                    state: std::mem::take(&mut sealed.uncommitted),
                    ..Batch::default()
                };
                self.write(batch).await.map_err(HandlerError::from_store)?;
            }
            state = sealed.transactional;
            state.extend(markers);
        }
        let mut batch = self
            .event
            .staged()
            .extract_if(.., |(staged_by, _)| *staged_by == self.attempt)
            .fold(Batch::default(), |batch, (_, change)| {
                batch.timer(key, TimerKind::Application, change)
            });
        batch.state = state;
        for rider in riders {
            match rider {
                Rider::Dedup(write) => batch.dedup.push(*write),
                Rider::Defer(write) => batch.deferrals.push(write.clone()),
            }
        }
        if !batch.is_empty() {
            self.event.commit_started.store(true, Ordering::Release);
            self.write(batch).await.map_err(HandlerError::from_store)?;
        }
        self.event.committed.store(true, Ordering::Release);
        Ok(())
    }
}
