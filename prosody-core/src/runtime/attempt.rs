//! One event's way through the stack: call, and try again on a transient
//! failure until it settles or the partition stops.

use super::alarm::Fire;
use super::answer::{self, Answerer, Settled};
use super::first::{self, First};
use super::lease::Lease;
use crate::Backoff;
use crate::access::PartitionStores;
use crate::broker::Record;
use crate::codec;
use crate::context::{Context, Demand, Scope};
use crate::error::{BoxError, Category, HandlerError};
use crate::event::{Encoded, Event, Timer};
use crate::handler::{EventRequest, EventService};
use crate::key::Key;
use crate::state::{AttemptState, Registry};
use crate::store::timer::{TimerKind, from_seconds, to_seconds};
use crate::store::{Batch, TimerChange};
use crate::work::UnitOfWork;
use futures_util::FutureExt;
use prosody_contracts::peer::Asked;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use tower::ServiceExt;
use tracing::{Instrument, Span, debug, debug_span, error, warn};

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
pub(crate) enum Job {
    Record(Record),
    Timer(Fire),
}

/// What one partition shares with each of its attempts, behind one `Arc`:
/// an attempt costs one count, not a clone of each part, nor of the stack.
pub(crate) struct Shared<S> {
    /// The partition's topic and number, and its shutdown signals.
    pub(crate) scope: Arc<Scope>,
    /// The runtime's last-resort retries.
    pub(crate) backoff: Backoff,
    /// The partition's stores, for handlers' contexts and the stages.
    pub(crate) stores: Arc<PartitionStores>,
    /// The client's state collections: `None` when it registered none.
    pub(crate) state: Option<Arc<Registry>>,
    /// Answers the requests the member's subsystem is asked, if any.
    pub(crate) answerer: Option<Arc<dyn Answerer>>,
    /// Held by every attempt, so a crashed member's consumer outlives them.
    #[expect(dead_code, reason = "held for its drop, never read")]
    pub(crate) lease: Arc<Lease>,
    /// The stack, cloned for the calls the partition's own stack cannot
    /// make: an attempt that must wait for the stack to be ready, and the
    /// runtime's last-resort retries (rare: the modes retry in the stack).
    /// Behind a lock only so the parts can be shared: a stack need not be
    /// `Sync`.
    pub(crate) stack: Mutex<S>,
}

impl<S: Clone> Shared<S> {
    /// A clone of the stack.
    pub(crate) fn stack(&self) -> S {
        // Cloning panics in no stack of ours; a poisoned lock still holds
        // the stack as it was.
        self.stack
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What every attempt at one event is made of: its key, its unit of work
/// (whose event share all its attempts share) and its span.
///
/// Invariant: one per event, shared by all its attempts; each attempt
/// begins its own unit of work, and only the one that commits writes it.
pub(crate) struct Attempts {
    key: Key,
    work: UnitOfWork,
    span: Span,
    /// The request the record carries, if the member answers it (boxed: a
    /// record that is not one carries a pointer, not the request).
    asked: Option<Box<Asked>>,
}

impl Attempts {
    /// The attempts at `job` of `key`.
    pub(crate) fn new<S>(shared: &Shared<S>, key: Key, job: &Job) -> Self {
        let access = Arc::clone(&shared.stores);
        let mut asked = None;
        let (work, span) = match job {
            Job::Record(record) => (
                {
                    let work = UnitOfWork::new(access).with_answerer(shared.answerer.clone());
                    asked = shared
                        .answerer
                        .as_ref()
                        .and_then(|answerer| answer::asked(answerer, record))
                        .map(Box::new);
                    if asked.is_some() {
                        work.await_response();
                    }
                    work
                },
                debug_span!(
                    "handle",
                    topic = %record.topic,
                    partition = record.partition,
                    offset = record.offset,
                    key = %key,
                ),
            ),
            Job::Timer(fire) => (
                UnitOfWork::new(access)
                    .with_deferrals(fire.deferrals)
                    .with_answerer(shared.answerer.clone()),
                debug_span!(
                    "timer",
                    key = %key,
                    time = from_seconds(fire.due.second).as_millis(),
                    kind = ?fire.due.kind,
                ),
            ),
        };
        Self {
            key,
            work,
            span,
            asked,
        }
    }

    /// Answers the request the settled record carries, if the member
    /// answers it: with the stack's response (committed by now), else the
    /// message of its permanent failure.
    pub(crate) fn answer<S>(&self, shared: &Shared<S>) {
        let (Some(asked), Some(answerer)) = (&self.asked, &shared.answerer) else {
            return;
        };
        // A failure recorded settled the event: the response beside it is
        // the stage's stand-in (routed, dropped), not the handler's.
        let settled = match (self.work.take_failure(), self.work.take_response_boxed()) {
            (Some(message), _) => Settled::Failed(message),
            (None, Some(response)) => Settled::Response(response),
            (None, None) => return,
        };
        answerer.answer(Asked::clone(asked), settled);
    }

    /// The span the attempts run in.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// The request of attempt number `attempt` (from 0) at `job`.
    pub(crate) fn request<S>(
        &self,
        shared: &Shared<S>,
        job: &Job,
        demand: Demand,
        attempt: u32,
    ) -> EventRequest<Encoded> {
        let key = &self.key;
        let event = match job {
            Job::Record(record) => codec::encoded(key, record),
            Job::Timer(fire) => Event::Timer(
                Timer::new(key.clone(), from_seconds(fire.due.second))
                    .with_kind(fire.due.kind)
                    .with_trace(fire.due.trace.clone()),
            ),
        };
        let context = Context::scoped(key.clone(), Arc::clone(&shared.scope))
            .with_demand(demand)
            .with_attempt(attempt.saturating_add(1));
        let work = match &shared.state {
            Some(registry) => self.work.clone().with_state(AttemptState::new(
                Arc::clone(&shared.stores),
                Arc::clone(registry),
                key.clone(),
            )),
            None => self.work.clone(),
        };
        EventRequest::new(event, context.with_work(work))
    }

    /// Keeps the response of the call that settled the event in its unit
    /// of work, where it is reachable after the commit.
    pub(crate) fn respond<R: Send + 'static>(&self, response: R) {
        self.work.respond(response);
    }

    /// Marks the event as one whose response a requester waits for.
    #[cfg(test)]
    pub(crate) fn await_response(&self) {
        self.work.await_response();
    }

    /// The response the event settled with, if it is an `R`.
    #[cfg(test)]
    pub(crate) fn response<R: 'static>(&self) -> Option<R> {
        self.work.take_response()
    }
}

/// Runs one record or timer through the stack until it settles, the
/// partition is cancelled, or a terminal error stops it. `first` is how
/// its first call was made where it started.
///
/// Invariant: returns [`Outcome::Settled`] only after the stack succeeded or
/// failed permanently (logged), so the caller may commit past the record;
/// a settled timer has been removed from the store (or its removal logged).
pub(crate) async fn run<S>(
    shared: Arc<Shared<S>>,
    attempts: Attempts,
    job: &Job,
    first: First<S, S::Future>,
) -> Outcome
where
    S: EventService<Encoded>,
{
    let span = attempts.span.clone();
    let outcome = attempt_loop(&shared, &attempts, job, first)
        .instrument(span)
        .await;
    let Job::Timer(fire) = job else {
        if outcome == Outcome::Settled {
            attempts.answer(&shared);
        }
        return outcome;
    };
    if outcome != Outcome::Settled {
        return outcome;
    }
    let work = &attempts.work;
    if let Some(at) = work.put_off_until() {
        // Put off by the defer stage: it stays stored.
        return Outcome::Delayed(to_seconds(at));
    }
    // A handler that succeeded removed its timer in its commit; a timer
    // settled otherwise (dropped, routed) is removed here. A defer timer is
    // the defer stage's to remove: a stack without that stage leaves it,
    // and its key's backlog, in the store.
    let (kind, time) = (fire.due.kind, from_seconds(fire.due.second));
    let key = &attempts.key;
    if !work.committed()
        && kind == TimerKind::Application
        && let Err(error) = shared
            .stores
            .commit(Batch::default().timer(key, kind, TimerChange::Unschedule { time }))
            .await
    {
        warn!(%error, %key, "removing a fired timer failed; it may fire again");
    }
    Outcome::Settled
}

async fn attempt_loop<S>(
    shared: &Shared<S>,
    attempts: &Attempts,
    job: &Job,
    first: First<S, S::Future>,
) -> Outcome
where
    S: EventService<Encoded>,
{
    let mut demand = Demand::Normal;
    let mut attempt = 0u32;
    // The stack for the calls the partition's could not make.
    let (mut first, mut service) = match first {
        First::Called(call) => (Some(Ok(call)), None),
        First::Failed(error) => (Some(Err(error)), None),
        First::Waiting(service) => (None, Some(service)),
    };
    loop {
        let call = async {
            match first.take() {
                Some(Ok(call)) => match call.await {
                    Some(result) => result
                        .map(|response| attempts.respond(response))
                        .map_err(Into::into),
                    None => Err(first::gone()),
                },
                Some(Err(error)) => Err(error),
                // Boxed: a call after the first is rare, and its future
                // inline would make every attempt's future (moved into its
                // box once per record) as large again.
                None => {
                    let request = attempts.request(shared, job, demand, attempt);
                    let service = service.get_or_insert_with(|| shared.stack());
                    let response = Box::pin(call_when_ready(service, request)).await?;
                    attempts.respond(response);
                    Ok(())
                }
            }
        };
        let result = AssertUnwindSafe(call).catch_unwind().await;
        let error = match result {
            Ok(Ok(())) => return Outcome::Settled,
            Ok(Err(error)) => HandlerError::from_boxed(error),
            Err(_) => HandlerError::transient("the handler panicked"),
        };
        match error.category() {
            Category::Permanent => {
                error!(%error, "permanent failure; the record is settled without success");
                attempts.work.fail(&error);
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

/// Calls `service` with `request` once it is ready.
async fn call_when_ready<S>(
    service: &mut S,
    request: EventRequest<Encoded>,
) -> Result<S::Response, BoxError>
where
    S: EventService<Encoded>,
{
    let ready = service.ready().await.map_err(Into::into)?;
    ready.call(request).await.map_err(Into::into)
}
