//! One event's way through the stack: call, and try again on a transient
//! failure until it settles or the partition stops.

use super::alarm::Fire;
use super::lease::Lease;
use crate::broker::Record;
use crate::codec;
use crate::context::{Context, Demand, Scope};
use crate::error::{Category, HandlerError};
use crate::event::{Encoded, Event, Timer};
use crate::handler::{EventRequest, EventService};
use crate::key::Key;
use crate::state::{AttemptState, Registry};
use crate::store::timer::{TimerKind, from_seconds, to_seconds};
use crate::store::{Batch, TimerChange};
use crate::timers::{StoreAccess, Timers};
use futures_util::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;
use tracing::{Instrument, debug, debug_span, error, warn};

/// How an event left the runtime's hands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Handled, or failed in a way that settles it (permanent).
    Settled,
    /// Stopped before it settled (revocation or shutdown); a later owner
    /// handles it again.
    Unsettled,
    /// A terminal error, described: the partition stops.
    Terminal(Arc<str>),
    /// A timer the defer stage put off: it stays stored and runs again at
    /// this second.
    Delayed(i64),
}

/// What a key queue holds: a record of the partition, or a timer of the key
/// that came due.
#[derive(Debug)]
pub(crate) enum Work {
    Record(Record),
    Timer(Fire),
}

/// The exponential backoff of the runtime's last-resort retry.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Backoff {
    pub(crate) base: Duration,
    pub(crate) max: Duration,
}

impl Backoff {
    /// The delay before retry number `attempt` (from 1): `base * 2^(attempt-1)`,
    /// capped at `max`.
    pub(crate) fn delay(self, attempt: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempt.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }
}

/// What one partition shares with each of its attempts, behind one `Arc`:
/// an attempt costs its stack's clone and one count, not a clone of each.
pub(crate) struct Shared {
    /// The partition's topic and number, and its shutdown signals.
    pub(crate) scope: Arc<Scope>,
    pub(crate) backoff: Backoff,
    /// The partition's timers, for handlers' contexts.
    pub(crate) timers: Arc<dyn StoreAccess>,
    /// The client's state collections: `None` when it registered none.
    pub(crate) state: Option<Arc<Registry>>,
    /// Held by every attempt, so a crashed member's consumer outlives them.
    #[expect(dead_code, reason = "held for its drop, never read")]
    pub(crate) lease: Arc<Lease>,
}

/// Runs one record or timer through the stack until it settles, the
/// partition is cancelled, or a terminal error stops it.
///
/// Invariant: returns [`Outcome::Settled`] only after the stack succeeded or
/// failed permanently (logged), so the caller may commit past the record;
/// a settled timer has been removed from the store (or its removal logged).
pub(crate) async fn run<S>(service: S, shared: Arc<Shared>, key: Key, work: &Work) -> Outcome
where
    S: EventService<Encoded>,
{
    match work {
        Work::Record(record) => {
            let span = debug_span!(
                "handle",
                topic = %record.topic,
                partition = record.partition,
                offset = record.offset,
                key = %key,
            );
            let timers = Timers::new(Arc::clone(&shared.timers));
            attempt_loop(service, &shared, &key, &timers, || {
                codec::encoded(&key, record)
            })
            .instrument(span)
            .await
        }
        Work::Timer(fire) => {
            let (time, kind) = (from_seconds(fire.due.second), fire.due.kind);
            let span = debug_span!("timer", key = %key, time = time.as_millis(), ?kind);
            let timer = Timer {
                key: key.clone(),
                time,
                kind,
                trace: fire.due.trace.clone(),
            };
            let access = Arc::clone(&shared.timers);
            let timers = Timers::new(Arc::clone(&access)).with_deferrals(fire.deferrals);
            let outcome = attempt_loop(service, &shared, &key, &timers, || {
                Event::Timer(timer.clone())
            })
            .instrument(span)
            .await;
            if outcome != Outcome::Settled {
                return outcome;
            }
            if let Some(at) = timers.retry_requested() {
                // Put off by the defer stage: it stays stored.
                return Outcome::Delayed(to_seconds(at));
            }
            // A handler that succeeded removed its timer in its commit; a
            // timer settled otherwise (dropped, routed) is removed here. A
            // defer timer is the defer stage's to remove: a stack without
            // that stage leaves it, and its key's backlog, in the store.
            if !timers.committed()
                && kind == TimerKind::Application
                && let Err(error) = access
                    .commit(Batch::default().timer(&key, kind, TimerChange::Unschedule { time }))
                    .await
            {
                warn!(%error, %key, "removing a fired timer failed; it may fire again");
            }
            Outcome::Settled
        }
    }
}

async fn attempt_loop<S>(
    mut service: S,
    shared: &Shared,
    key: &Key,
    timers: &Timers,
    event_of: impl Fn() -> Event<Encoded>,
) -> Outcome
where
    S: EventService<Encoded>,
{
    let mut demand = Demand::Normal;
    let mut attempt = 0u32;
    loop {
        let event = event_of();
        let context = Context::scoped(key.clone(), Arc::clone(&shared.scope))
            .with_demand(demand)
            .with_attempt(attempt.saturating_add(1))
            .with_timers(timers.clone());
        let context = match &shared.state {
            Some(registry) => context.with_state(AttemptState::new(
                Arc::clone(&shared.timers),
                Arc::clone(registry),
                key.clone(),
            )),
            None => context,
        };
        // The task's own clone of the stack serves every attempt of it.
        let service = &mut service;
        let call = async move {
            let ready = service.ready().await?;
            ready.call(EventRequest { event, context }).await
        };
        let result = AssertUnwindSafe(call).catch_unwind().await;
        let error = match result {
            Ok(Ok(_)) => return Outcome::Settled,
            Ok(Err(error)) => HandlerError::from_boxed(error.into()),
            Err(_) => HandlerError::transient("the handler panicked"),
        };
        match error.category() {
            Category::Permanent => {
                error!(%error, "permanent failure; the record is settled without success");
                return Outcome::Settled;
            }
            Category::Terminal => {
                error!(%error, "terminal failure; the partition stops");
                return Outcome::Terminal(error.to_string().into());
            }
            Category::Transient if shared.scope.shutdown.is_cancelled() => {
                // Turned away or cut short by the drain: the next owner
                // handles it.
                debug!(%error, "left unsettled by the shutdown");
                return Outcome::Unsettled;
            }
            Category::Transient => {}
        }
        attempt = attempt.saturating_add(1);
        demand = Demand::Failure;
        let delay = shared.backoff.delay(attempt);
        warn!(%error, attempt, ?delay, "transient failure; trying again");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shared.scope.shutdown.cancelled() => return Outcome::Unsettled,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use proptest::prelude::*;
    use std::time::Duration;

    proptest! {
        #[test]
        fn backoff_doubles_up_to_the_cap(base in 1..1000u64, max in 1..100_000u64, attempt in 1..200u32) {
            let backoff = Backoff { base: Duration::from_millis(base), max: Duration::from_millis(max) };
            let delay = backoff.delay(attempt);
            prop_assert!(delay <= backoff.max);
            prop_assert!(backoff.delay(attempt + 1) >= delay);
            prop_assert_eq!(backoff.delay(1), backoff.base.min(backoff.max));
        }
    }
}
