//! The stage's slow paths: setting a record aside, storing a key's later
//! records behind it, and draining a key's backlog when its timer fires.

use super::decide::{Boxed, Failed, after, failed};
use super::{Origin, Shared};
use crate::Settlement;
use crate::answer;
use crate::broker::TopicPartition;
use crate::clock::Timestamp;
use crate::codec;
use crate::context::{Context, Demand};
use crate::error::{Category, HandlerError};
use crate::event::{Encoded, Event};
use crate::handler::{EventRequest, Extensions};
use crate::key::Key;
use crate::loader::Loader;
use crate::metrics::Action;
use crate::peer::Answer;
use crate::response;
use crate::store::defer::Deferral;
use crate::store::timer::TimerKind;
use crate::store::{Batch, DeferWrite, TimerChange};
use crate::work::Rider;
use std::collections::VecDeque;
use std::sync::Arc;
use tower::{Service, ServiceExt};
use tracing::{debug, error, warn};

/// The partition stops: the backlog stays for its next owner.
#[derive(Debug, thiserror::Error)]
#[error("the partition is shutting down; the deferred backlog waits for its next owner")]
struct ShuttingDown;

/// A context without timers (built outside the runtime) cannot defer.
#[derive(Debug, thiserror::Error)]
#[error("this context has no timers, so the event cannot be deferred")]
struct NoTimers;

/// Sets a failed record aside: its key's defer timer first, then its
/// offset, so a stored offset always has a timer. Either write failing
/// fails the event with `error`, for the retry stage.
pub(super) fn defer<R, L>(shared: Arc<Shared<L>>, origin: Origin, error: HandlerError) -> Boxed<R>
where
    R: Settlement + Send + 'static,
    L: Send + Sync + 'static,
{
    Box::pin(async move {
        let Origin::Record {
            partition,
            key,
            offset,
            context,
        } = origin
        else {
            return Err(error);
        };
        let Some(timers) = context.work() else {
            debug!(%key, offset, "{NoTimers}");
            return Err(error);
        };
        let delay = shared.config.backoff().delay(1);
        let at = after(delay, None);
        // The timer before the offset: a stored offset always has a timer.
        let batch = Batch::default()
            .timer(&key, TimerKind::Defer, schedule(at))
            .deferral(DeferWrite::Defer {
                key: key.clone(),
                offset,
                deferral: Deferral::AfterFailure,
            });
        if let Err(store) = timers.write(batch).await {
            if !store.is_retriable() {
                // A refusal halts the partition, naming the store's error.
                return Err(HandlerError::from_store(store));
            }
            warn!(%key, offset, %store, "deferring failed; the retry stage tries again");
            return Err(error);
        }
        context.meter().count(Action::Deferred);
        warn!(%error, %partition, %key, offset, ?delay, "transient failure; message deferred");
        Ok(R::unhandled())
    })
}

/// A record of a key the store could not peek: stored behind the key's
/// backlog if it has one, else handled by the ready service `ready`.
pub(super) fn lookup<S, L>(
    shared: Arc<Shared<L>>,
    mut ready: S,
    request: EventRequest<Encoded>,
    origin: Origin,
) -> Boxed<S::Response>
where
    S: Service<EventRequest<Encoded>, Error = HandlerError> + Send + 'static,
    S::Response: Settlement + Send + 'static,
    S::Future: Send,
    L: Send + Sync + 'static,
{
    Box::pin(async move {
        let (Origin::Record { key, .. }, Some(work)) = (&origin, origin.context().work()) else {
            return ready.call(request).await;
        };
        let backlog = work
            .stores()
            .deferred(key)
            .await
            .map_err(HandlerError::from_store)?;
        if backlog.is_some() {
            return behind(&origin).await;
        }
        let result = ready.call(request).await;
        match failed(&shared, &origin, result) {
            Failed::Returned(result) => result,
            Failed::Defer(error) => defer(shared, origin, error).await,
        }
    })
}

/// Stores a record behind its key's backlog, unhandled, to keep the key's
/// order.
async fn behind<R: Settlement>(origin: &Origin) -> Result<R, HandlerError> {
    let Origin::Record {
        partition,
        key,
        offset,
        context,
    } = origin
    else {
        return Ok(R::unhandled());
    };
    let Some(timers) = context.work() else {
        return Err(HandlerError::transient(NoTimers));
    };
    let batch = Batch::default().deferral(DeferWrite::Defer {
        key: key.clone(),
        offset: *offset,
        deferral: Deferral::Behind,
    });
    timers
        .write(batch)
        .await
        .map_err(HandlerError::from_store)?;
    context.meter().count(Action::Deferred);
    debug!(%partition, %key, offset, "message deferred behind its key's backlog");
    Ok(R::unhandled())
}

/// Stores a record behind its key's backlog, boxed, for a key the store
/// peeked as deferred.
pub(super) fn defer_behind<R>(origin: Origin) -> Boxed<R>
where
    R: Settlement + Send + 'static,
{
    Box::pin(async move { behind(&origin).await })
}

/// The schedule of a defer timer at `at`.
fn schedule(at: Timestamp) -> TimerChange {
    TimerChange::Schedule {
        time: at,
        trace: None,
    }
}

/// A defer timer fired: retries the key's deferred records head first
/// through `inner` until the backlog is empty or one fails. Either way the
/// firing timer is removed here, after any timer that replaces it was set
/// (the runtime never removes defer timers: a stack without this stage
/// leaves them, and their backlog, for one that has it).
///
/// A head that succeeds is completed in its handler's own batch (a rider of
/// the attempt); a head settled otherwise (a duplicate skipped, a permanent
/// failure, a record the log no longer holds) in a batch of its own. The
/// key runs nothing else meanwhile (the runtime's per-key exclusivity), so
/// the backlog read at the start is the backlog; it is read again once
/// drained, for offsets another writer may have added.
pub(super) fn drain<S, L>(
    shared: Arc<Shared<L>>,
    inner: S,
    request: EventRequest<Encoded>,
) -> Boxed<S::Response>
where
    S: Service<EventRequest<Encoded>, Error = HandlerError> + Clone + Send + 'static,
    S::Response: Settlement + Send + 'static,
    S::Future: Send,
    L: Loader,
{
    Box::pin(async move {
        let (event, context, extensions) = (request.event, request.context, request.extensions);
        let Event::Timer(timer) = event else {
            return Err(HandlerError::permanent(NoTimers));
        };
        let Some(timers) = context.work().cloned() else {
            return Err(HandlerError::permanent(NoTimers));
        };
        let key = timer.key;
        let partition = TopicPartition::new(Arc::clone(context.topic()), context.partition());
        let fired = TimerChange::Unschedule { time: timer.time };
        let read = || async {
            timers
                .stores()
                .deferred(&key)
                .await
                .map_err(HandlerError::from_store)
        };
        let mut backlog: VecDeque<i64> = VecDeque::new();
        let mut failures = 0;
        if let Some(deferred) = read().await? {
            backlog.extend(deferred.offsets);
            failures = deferred.failures;
        }
        loop {
            if context.is_shutting_down() {
                return Err(HandlerError::transient(ShuttingDown));
            }
            let Some(&head) = backlog.front() else {
                // Drained, unless another writer deferred more meanwhile.
                if let Some(deferred) = read().await? {
                    backlog.extend(deferred.offsets);
                    failures = deferred.failures;
                    continue;
                }
                let batch = Batch::default().timer(&key, TimerKind::Defer, fired);
                timers
                    .write(batch)
                    .await
                    .map_err(HandlerError::from_store)?;
                return Ok(S::Response::unhandled());
            };
            let head_context = context.clone().with_work(timers.detached());
            let result = try_head(
                &shared,
                inner.clone(),
                (head_context, extensions.clone()),
                (&partition, &key),
                head,
                failures,
            )
            .await;
            let completed_by_its_batch = match result {
                Ok(handled) => {
                    shared.record(false);
                    handled
                }
                Err(error) => match error.category() {
                    Category::Permanent => {
                        error!(%error, %partition, %key, offset = head,
                            "deferred message failed permanently; settled without success");
                        false
                    }
                    Category::Terminal => return Err(error),
                    Category::Transient => {
                        if context.is_shutting_down() || !shared.record(true) {
                            return Err(error);
                        }
                        failures = failures.saturating_add(1);
                        let delay = shared.config.backoff().delay(failures);
                        let at = after(delay, Some(timer.time));
                        // The next timer before the firing one goes: the
                        // backlog is never without one.
                        let batch = Batch::default()
                            .timer(&key, TimerKind::Defer, schedule(at))
                            .timer(&key, TimerKind::Defer, fired)
                            .deferral(DeferWrite::Failed { key: key.clone() });
                        timers
                            .write(batch)
                            .await
                            .map_err(HandlerError::from_store)?;
                        context.meter().count(Action::Deferred);
                        warn!(%error, %partition, %key, offset = head, failures, ?delay,
                            "deferred message failed; retrying later");
                        return Ok(S::Response::unhandled());
                    }
                },
            };
            if !completed_by_its_batch {
                let batch = Batch::default().deferral(DeferWrite::Complete {
                    key: key.clone(),
                    offset: head,
                });
                timers
                    .write(batch)
                    .await
                    .map_err(HandlerError::from_store)?;
            }
            backlog.pop_front();
            // The next head has not run yet: it is tried at once.
            failures = 0;
            // A long backlog on a store that never waits must not hold the
            // thread: let other tasks run between records.
            tokio::task::yield_now().await;
        }
    })
}

/// Reads the backlog's head at `offset` and runs it through `inner`, as
/// the attempt its failure count makes it, completing it in its handler's
/// own batch (a rider) if it succeeds; returns whether its handler
/// succeeded. A head that carries a request the member answers is answered
/// once it settles (its changes committed), as the runtime answers a
/// record.
async fn try_head<S, L>(
    shared: &Shared<L>,
    inner: S,
    (context, extensions): (Context, Extensions),
    (partition, key): (&TopicPartition, &Key),
    head: i64,
    failures: u32,
) -> Result<bool, HandlerError>
where
    S: Service<EventRequest<Encoded>, Error = HandlerError>,
    S::Response: Settlement + Send + 'static,
    L: Loader,
{
    match load(shared, partition, key, head).await {
        Loaded::Event(event) => {
            let answerer = context.answerer().cloned();
            let asked = answerer
                .as_ref()
                .and_then(|answerer| answer::asked_in(answerer, &event));
            // A head that never ran is fresh work; one that failed before
            // is a retry.
            let demand = if failures == 0 {
                Demand::Normal
            } else {
                Demand::Failure
            };
            let context = context
                .with_demand(demand)
                .with_attempt(failures.saturating_add(1));
            let extensions = extensions.with_rider(Rider::Defer(DeferWrite::Complete {
                key: key.clone(),
                offset: head,
            }));
            let request = EventRequest {
                event,
                context,
                extensions,
            };
            let result = inner.oneshot(request).await;
            // Settled with its response, or a permanent failure; a
            // transient one leaves it to be tried again.
            answer::send(answerer.as_ref(), asked.as_ref(), || match &result {
                Ok(response) => response.answer(),
                Err(error) if error.category() == Category::Permanent => {
                    Some(Answer::Failed(response::failure(error)))
                }
                Err(_) => None,
            });
            result.map(|response| response.handled())
        }
        Loaded::Gone => Err(HandlerError::permanent(Gone)),
        Loaded::Failed(error) => Err(error),
    }
}

/// The log no longer holds a deferred record.
#[derive(Debug, thiserror::Error)]
#[error("the deferred record is no longer in the log (retention or compaction)")]
struct Gone;

/// A loaded record does not belong to the key it was deferred for.
#[derive(Debug, thiserror::Error)]
#[error("the record at the deferred offset has key {found:?}, not the deferred key")]
struct OtherKey {
    found: String,
}

enum Loaded {
    Event(Event<Encoded>),
    Gone,
    Failed(HandlerError),
}

/// Reads the deferred record at `offset` back as an event of `key`.
async fn load<L: Loader>(
    shared: &Shared<L>,
    partition: &TopicPartition,
    key: &Key,
    offset: i64,
) -> Loaded {
    let record = match shared.loader.load(partition, offset).await {
        Ok(Some(record)) => record,
        Ok(None) => return Loaded::Gone,
        Err(error) => return Loaded::Failed(HandlerError::transient(error)),
    };
    // The key it queued under when it was deferred.
    let found = codec::record_key(&record);
    if found != *key {
        let found = found.as_str().to_owned();
        return Loaded::Failed(HandlerError::permanent(OtherKey { found }));
    }
    Loaded::Event(codec::encoded(key, &record))
}
