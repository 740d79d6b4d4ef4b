//! What a handler knows about the event it handles, and how it learns that
//! it should stop.

use crate::answer::Answerer;
use crate::clock::Timestamp;
use crate::event::{Event, Topic};
use crate::key::Key;
use crate::metrics::PartitionMeter;
use crate::state::{Definition, StateError};
use crate::store::TimerChange;
use crate::timers::{self, TimerError};
use crate::work::UnitOfWork;
use std::future::Future;
use std::sync::Arc;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Which scheduling class an event belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Demand {
    /// Fresh work: a message, timer or excise tried for the first time.
    #[default]
    Normal,
    /// Work that failed before and is being tried again.
    Failure,
}

/// What every call of one partition shares: where its events come from,
/// and the partition's two shutdown signals. One per partition, so a
/// context clone costs a count, not a clone of each part.
#[derive(Debug)]
pub(crate) struct Scope {
    pub(crate) topic: Topic,
    pub(crate) partition: i32,
    /// Fires when the partition starts draining.
    pub(crate) shutdown: CancellationToken,
    /// Fires near the end of the drain: handlers should stop.
    pub(crate) cancel: CancellationToken,
    /// The partition's meter.
    pub(crate) meter: PartitionMeter,
    /// Answers the requests the member's subsystem is asked, if any.
    pub(crate) answerer: Option<Arc<dyn Answerer>>,
}

/// The context of one handler call.
///
/// Invariant: once [`Context::should_cancel`] returns `true` it stays `true`,
/// and every [`Context::on_cancel`] future of this context has completed or
/// completes at once. Cancellation comes from the partition (near the end
/// of a drain) or from the attempt's deadline; [`Context::is_expired`]
/// tells the second apart.
#[derive(Clone, Debug)]
pub struct Context {
    key: Key,
    scope: Arc<Scope>,
    demand: Demand,
    attempt: u32,
    /// When the attempt's time is up (set by the timeout stage).
    deadline: Option<Instant>,
    /// The attempt's unit of work: its timers and keyed state.
    work: Option<UnitOfWork>,
}

impl Context {
    /// A context for an event of `key` on `topic` and `partition`. Its
    /// partition starts shutting down when `shutdown` fires, and the handler
    /// should stop when `cancel` fires.
    #[must_use]
    pub fn new(
        key: Key,
        topic: Topic,
        partition: i32,
        shutdown: CancellationToken,
        cancel: CancellationToken,
    ) -> Self {
        let scope = Scope {
            topic,
            partition,
            shutdown,
            cancel,
            meter: PartitionMeter::default(),
            answerer: None,
        };
        Self::scoped(key, Arc::new(scope))
    }

    /// The same context recording into `meter`, as the runtime's contexts
    /// record into their partition's meter (for requests made outside the
    /// runtime: tests and benchmarks).
    #[must_use]
    pub fn with_meter(mut self, meter: PartitionMeter) -> Self {
        if let Some(scope) = Arc::get_mut(&mut self.scope) {
            scope.meter = meter;
            return self;
        }
        let scope = &self.scope;
        self.scope = Arc::new(Scope {
            topic: Arc::clone(&scope.topic),
            partition: scope.partition,
            shutdown: scope.shutdown.clone(),
            cancel: scope.cancel.clone(),
            meter,
            answerer: scope.answerer.clone(),
        });
        self
    }

    /// The partition's meter.
    pub(crate) fn meter(&self) -> &PartitionMeter {
        &self.scope.meter
    }

    /// What answers the requests the partition's records carry, if the
    /// member answers any.
    pub(crate) fn answerer(&self) -> Option<&Arc<dyn Answerer>> {
        self.scope.answerer.as_ref()
    }

    /// A context for an event of `key` in a partition's `scope`.
    #[must_use]
    pub(crate) fn scoped(key: Key, scope: Arc<Scope>) -> Self {
        Self {
            key,
            scope,
            demand: Demand::Normal,
            attempt: 1,
            deadline: None,
            work: None,
        }
    }

    /// The same context with its event's unit of work.
    #[must_use]
    pub(crate) fn with_work(mut self, work: UnitOfWork) -> Self {
        self.work = Some(work);
        self
    }

    /// The same context for the next attempt at `event`: a unit of work of
    /// its own ([`UnitOfWork::begin`]).
    #[must_use]
    pub(crate) fn begin<P>(mut self, event: &Event<P>) -> Self {
        self.work = self.work.as_ref().map(|work| work.begin(event));
        self
    }

    /// The attempt's unit of work, to commit it once it succeeded.
    pub(crate) fn work(&self) -> Option<&UnitOfWork> {
        self.work.as_ref()
    }

    /// Binds this key's collection of `definition` for this attempt.
    ///
    /// What the handle writes is pending until the handler succeeds, then
    /// lands in one write with the attempt's timers; a failed attempt's
    /// changes are dropped, and its retry does not see them. The handle
    /// borrows the context, so it cannot outlive the handler; a clone of
    /// the context kept past it gets [`StateError::AttemptEnded`].
    ///
    /// # Errors
    ///
    /// [`StateError::Unregistered`] if the client did not register the
    /// definition (`state_collections`), [`StateError::Mismatch`] if the
    /// store keeps another kind or payload under its name, and
    /// [`StateError::Unavailable`] outside the runtime.
    pub fn state<D: Definition>(&self, definition: &D) -> Result<D::Handle<'_>, StateError> {
        let state = self.attempt_state()?;
        Ok(definition.bind(state.slot(definition.spec())?))
    }

    /// Clears every registered collection of this key when the attempt
    /// succeeds: what an excise handler does to forget the key.
    ///
    /// # Errors
    ///
    /// [`StateError::Unavailable`] outside the runtime or after the attempt.
    pub fn clear_state(&self) -> Result<(), StateError> {
        self.attempt_state()?.clear_all()
    }

    fn attempt_state(&self) -> Result<&crate::state::AttemptState, StateError> {
        self.work
            .as_ref()
            .and_then(UnitOfWork::state)
            .ok_or(StateError::Unavailable)
    }

    fn timers_or_err(&self) -> Result<&UnitOfWork, TimerError> {
        self.work.as_ref().ok_or(TimerError::Unavailable)
    }

    /// Schedules a timer for this key at `time` (rounded to the second).
    /// It is written when the handler succeeds; a failed attempt's timer
    /// changes are discarded. Scheduling the same time twice gives one timer.
    pub fn schedule(&self, time: Timestamp) -> Result<(), TimerError> {
        self.timers_or_err()?.stage(TimerChange::Schedule {
            time: timers::rounded(time),
            trace: trace(),
        });
        Ok(())
    }

    /// Removes every timer of this key, then schedules one at `time`.
    pub fn clear_and_schedule(&self, time: Timestamp) -> Result<(), TimerError> {
        let timers = self.timers_or_err()?;
        timers.stage(TimerChange::Clear);
        timers.stage(TimerChange::Schedule {
            time: timers::rounded(time),
            trace: trace(),
        });
        Ok(())
    }

    /// Removes this key's timer at `time`, if there is one.
    pub fn unschedule(&self, time: Timestamp) -> Result<(), TimerError> {
        self.timers_or_err()?.stage(TimerChange::Unschedule {
            time: timers::rounded(time),
        });
        Ok(())
    }

    /// Removes every timer of this key.
    pub fn clear_scheduled(&self) -> Result<(), TimerError> {
        self.timers_or_err()?.stage(TimerChange::Clear);
        Ok(())
    }

    /// This key's timers, ascending, including this attempt's changes.
    pub async fn scheduled(&self) -> Result<Vec<Timestamp>, TimerError> {
        self.timers_or_err()?.scheduled(&self.key).await
    }

    /// The key of the event.
    #[must_use]
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The topic of the partition the key belongs to.
    #[must_use]
    pub fn topic(&self) -> &Topic {
        &self.scope.topic
    }

    /// The partition the key belongs to.
    #[must_use]
    pub fn partition(&self) -> i32 {
        self.scope.partition
    }

    /// Whether this is fresh work or a retry of failed work.
    #[must_use]
    pub fn demand(&self) -> Demand {
        self.demand
    }

    /// The same context in another scheduling class.
    #[must_use]
    pub(crate) fn with_demand(mut self, demand: Demand) -> Self {
        self.demand = demand;
        self
    }

    /// Which attempt at the event this is, from 1.
    #[must_use]
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The same context for another attempt.
    #[must_use]
    pub(crate) fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// The same context with a deadline at `at`: from then on it is
    /// cancelled and [expired](Context::is_expired). A deadline the context
    /// already had still applies: the earlier of the two counts.
    #[must_use]
    pub(crate) fn with_deadline(mut self, at: Instant) -> Self {
        self.deadline = Some(self.deadline.map_or(at, |earlier| earlier.min(at)));
        self
    }

    /// When the attempt's time is up, if it has a deadline.
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the attempt's deadline has passed: what it does from now on
    /// does not count, and the handler service discards its changes.
    #[must_use]
    pub fn is_expired(&self) -> bool {
        self.deadline.is_some_and(|at| Instant::now() >= at)
    }

    /// Whether the partition is being handed off: revoked, unsubscribed, or
    /// the client is shutting down. It still runs the records it holds, but
    /// a failure is neither retried, deferred nor routed: it stays
    /// unsettled for the partition's next owner. Stopping
    /// ([`Context::is_stopping`]) and cancellation follow near the end of
    /// the shutdown timeout.
    #[must_use]
    pub fn is_shutting_down(&self) -> bool {
        self.scope.shutdown.is_cancelled()
    }

    /// Whether the partition has stopped starting attempts: on shutdown
    /// its budget is nearly spent (90% of `shutdown_timeout`), on a
    /// revocation at once; what still waits is left to the next owner.
    /// Running handlers see cancellation at the same moment.
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        self.scope.cancel.is_cancelled()
    }

    /// [`Context::is_stopping`] as a nameable future, for layers.
    pub fn on_stopping_owned(&self) -> WaitForCancellationFutureOwned {
        self.scope.cancel.clone().cancelled_owned()
    }

    /// Completes when the partition starts shutting down.
    pub fn on_shutdown(&self) -> impl Future<Output = ()> + Send + 'static {
        self.on_shutdown_owned()
    }

    /// [`Context::on_shutdown`] as a nameable future, for layers.
    pub fn on_shutdown_owned(&self) -> WaitForCancellationFutureOwned {
        self.scope.shutdown.clone().cancelled_owned()
    }

    /// Whether the handler should stop: its partition was revoked, the
    /// shutdown timeout is nearly over, or the attempt timed out.
    #[must_use]
    pub fn should_cancel(&self) -> bool {
        self.scope.cancel.is_cancelled() || self.is_expired()
    }

    /// Completes when the handler should stop.
    pub fn on_cancel(&self) -> impl Future<Output = ()> + Send + 'static {
        let cancel = self.scope.cancel.clone();
        let deadline = self.deadline;
        async move {
            match deadline {
                Some(at) => tokio::select! {
                    () = cancel.cancelled() => {}
                    () = tokio::time::sleep_until(at) => {}
                },
                None => cancel.cancelled().await,
            }
        }
    }
}

/// The scheduling span's `traceparent`, for the timer to follow from.
fn trace() -> Option<std::sync::Arc<str>> {
    crate::trace::current().map(std::sync::Arc::from)
}

#[cfg(test)]
mod tests {
    use super::Context;
    use std::time::Duration;
    use tokio::time::Instant;
    use tokio_util::sync::CancellationToken;

    #[tokio::test(start_paused = true)]
    async fn cancellation_from_the_partition_or_the_deadline_stays() {
        let root = CancellationToken::new();
        let context = Context::new(
            "k".into(),
            "t".into(),
            0,
            CancellationToken::new(),
            root.clone(),
        );
        let at = Instant::now() + Duration::from_secs(5);
        let timed = context.clone().with_deadline(at);
        assert!(!timed.should_cancel() && !timed.is_expired());
        timed.on_cancel().await;
        assert_eq!(Instant::now(), at, "woken at the deadline");
        assert!(timed.should_cancel() && timed.is_expired());
        assert!(!context.should_cancel() && !context.is_expired());
        let waiting = context.on_cancel();
        root.cancel();
        waiting.await;
        assert!(context.should_cancel() && !context.is_expired());
        context.on_cancel().await;
        let late = context
            .clone()
            .with_deadline(Instant::now() + Duration::from_secs(60));
        assert!(late.should_cancel() && !late.is_expired());
        late.on_cancel().await;
        // The earlier of two deadlines counts, whichever came first.
        let now = Instant::now();
        let outer = late.clone().with_deadline(now + Duration::from_secs(1));
        let inner = outer.clone().with_deadline(now + Duration::from_secs(9));
        assert_eq!(inner.deadline(), Some(now + Duration::from_secs(1)));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(inner.is_expired());
    }
}
