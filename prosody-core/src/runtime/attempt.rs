//! One event's way through the stack: call, and try again on a transient
//! failure until it settles or the partition stops.

use super::alarm::Fire;
use super::first::{self, First};
use super::lease::Lease;
use crate::Backoff;
use crate::access::PartitionStores;
use crate::answer;
use crate::broker::Record;
use crate::clock::Timestamp;
use crate::codec;
use crate::context::{Context, Demand, Scope};
use crate::error::{BoxError, Category, HandlerError};
use crate::event::{Encoded, Event, Timer};
use crate::handler::{EventRequest, EventService};
use crate::key::Key;
use crate::peer::Answer;
use crate::peer::Asked;
use crate::response::{self, Settlement};
use crate::state::{AttemptState, Registry};
use crate::store::timer::{TimerKind, from_seconds, to_seconds};
use crate::store::{Batch, TimerChange};
use crate::work::UnitOfWork;
use futures_util::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use tower::ServiceExt;
use tracing::{Instrument, Span, debug, debug_span, error, warn};

/// How an event left the runtime's hands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
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

/// How the attempts at one event ended, as a value.
#[derive(Debug)]
pub(crate) enum Attempt<R> {
    /// The stack returned this response: the event settled, with its
    /// changes committed (or a stage settled it, routed or dropped).
    Response(R),
    /// A permanent failure reached the runtime: the event settled without
    /// success.
    Failed(HandlerError),
    /// A firing timer the defer stage put off until this time: it stays
    /// stored.
    PutOff(Timestamp),
    /// Stopped before it settled (revocation or shutdown).
    Unsettled,
    /// A terminal failure, described: the partition stops.
    Terminal(Arc<str>),
}

impl<R: Settlement> Attempt<R> {
    /// The attempt that ended with the stack's `response`.
    pub(crate) fn of(response: R) -> Self {
        match response.put_off_until() {
            Some(at) => Self::PutOff(at),
            None => Self::Response(response),
        }
    }

    /// What a requester of the event's record is told, if anything.
    fn answer(&self) -> Option<Answer> {
        match self {
            Self::Response(response) => response.answer(),
            Self::Failed(error) => Some(Answer::Failed(response::failure(error))),
            Self::PutOff(_) | Self::Unsettled | Self::Terminal(_) => None,
        }
    }
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
    /// Whether a record's JSON parse is kept for the handler's codec.
    pub(crate) keep_parse: bool,
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
        let work = UnitOfWork::new(Arc::clone(&shared.stores));
        let (asked, span) = match job {
            Job::Record(record) => (
                shared
                    .scope
                    .answerer
                    .as_ref()
                    .and_then(|answerer| answer::asked(answerer, record))
                    .map(Box::new),
                debug_span!(
                    "handle",
                    topic = %record.topic,
                    partition = record.partition,
                    offset = record.offset,
                    key = %key,
                ),
            ),
            Job::Timer(fire) => (
                None,
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

    /// Answers the request the event's record carries, if the member
    /// answers it, with how its attempts ended (its changes committed by
    /// now).
    pub(crate) fn answer<S, R: Settlement>(&self, shared: &Shared<S>, attempt: &Attempt<R>) {
        answer::send(
            shared.scope.answerer.as_ref(),
            self.asked.as_deref(),
            || attempt.answer(),
        );
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
            Job::Record(record) => codec::encoded_keeping(key, record, shared.keep_parse),
            Job::Timer(fire) => Event::Timer(
                Timer::new(key.clone(), from_seconds(fire.due.second))
                    .with_kind(fire.due.kind)
                    .with_trace(fire.due.trace.clone()),
            ),
        };
        let context = Context::scoped(key.clone(), Arc::clone(&shared.scope))
            .with_demand(demand)
            .with_attempt(attempt.saturating_add(1));
        let deferrals = match job {
            Job::Timer(fire) => fire.deferrals,
            Job::Record(_) => 0,
        };
        let work = match &shared.state {
            Some(registry) => self.work.clone().with_state(AttemptState::new(
                Arc::clone(&shared.stores),
                Arc::clone(registry),
                key.clone(),
            )),
            None => self.work.clone(),
        };
        EventRequest::new(event, context.with_work(work)).with_deferrals(deferrals)
    }
}

/// Runs one record or timer through the stack until it settles, the
/// partition is cancelled, or a terminal error stops it. `first` is how
/// its first call was made where it started.
///
/// Invariant: returns [`Fate::Settled`] only after the stack succeeded or
/// failed permanently (logged), so the caller may commit past the record;
/// a settled timer has been removed from the store (or its removal logged).
pub(crate) async fn run<S>(
    shared: Arc<Shared<S>>,
    attempts: Attempts,
    job: &Job,
    first: First<S, S::Future>,
) -> Fate
where
    S: EventService<Encoded>,
{
    let span = attempts.span.clone();
    let attempt = attempt_loop(&shared, &attempts, job, first)
        .instrument(span)
        .await;
    attempts.answer(&shared, &attempt);
    match (attempt, job) {
        (Attempt::Terminal(cause), _) => Fate::Terminal(cause),
        (Attempt::Unsettled, _) => Fate::Unsettled,
        // Put off by the defer stage: it stays stored.
        (Attempt::PutOff(at), Job::Timer(_)) => Fate::Delayed(to_seconds(at)),
        // Only a timer is put off: a record settles, on every path.
        (Attempt::PutOff(_) | Attempt::Response(_) | Attempt::Failed(_), Job::Record(_)) => {
            Fate::Settled
        }
        (Attempt::Response(_) | Attempt::Failed(_), Job::Timer(fire)) => {
            remove(&shared, &attempts, fire).await;
            Fate::Settled
        }
    }
}

/// Removes a settled application timer from the store, unless its
/// handler's commit did. A handler that succeeded removed its timer in its
/// commit; a timer settled otherwise (dropped, routed) is removed here. A
/// defer timer is the defer stage's to remove: a stack without that stage
/// leaves it, and its key's backlog, in the store.
async fn remove<S>(shared: &Shared<S>, attempts: &Attempts, fire: &Fire) {
    let (kind, time) = (fire.due.kind, from_seconds(fire.due.second));
    let key = &attempts.key;
    if !attempts.work.committed()
        && kind == TimerKind::Application
        && let Err(error) = shared
            .stores
            .commit(Batch::default().timer(key, kind, TimerChange::Unschedule { time }))
            .await
    {
        warn!(%error, %key, "removing a fired timer failed; it may fire again");
    }
}

async fn attempt_loop<S>(
    shared: &Shared<S>,
    attempts: &Attempts,
    job: &Job,
    first: First<S, S::Future>,
) -> Attempt<S::Response>
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
                    Some(result) => result.map_err(Into::into),
                    None => Err(first::gone()),
                },
                Some(Err(error)) => Err(error),
                // Boxed: a call after the first is rare, and its future
                // inline would make every attempt's future (moved into its
                // box once per record) as large again.
                None => {
                    let request = attempts.request(shared, job, demand, attempt);
                    let service = service.get_or_insert_with(|| shared.stack());
                    Box::pin(call_when_ready(service, request)).await
                }
            }
        };
        let result = AssertUnwindSafe(call).catch_unwind().await;
        let error = match result {
            Ok(Ok(response)) => return Attempt::of(response),
            Ok(Err(error)) => HandlerError::from_boxed(error),
            Err(_) => HandlerError::transient("the handler panicked"),
        };
        match error.category() {
            Category::Permanent => {
                error!(%error, "permanent failure; the record is settled without success");
                return Attempt::Failed(error);
            }
            Category::Terminal => {
                error!(%error, "terminal failure; the partition stops");
                return Attempt::Terminal(error.to_string().into());
            }
            Category::Transient if shared.scope.shutdown.is_cancelled() => {
                // Turned away or cut short by the drain: the next owner
                // handles it.
                debug!(%error, "left unsettled by the shutdown");
                return Attempt::Unsettled;
            }
            Category::Transient => {}
        }
        attempt = attempt.saturating_add(1);
        demand = Demand::Failure;
        let delay = shared.backoff.delay(attempt);
        warn!(%error, attempt, ?delay, "transient failure; trying again");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shared.scope.shutdown.cancelled() => return Attempt::Unsettled,
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
