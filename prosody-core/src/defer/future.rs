//! The response future of the defer service.

use super::{Origin, Shared, backlog};
use crate::Settlement;
use crate::error::{Category, HandlerError};
use crate::metrics::Action;
use crate::store::timer::TimerKind;
use futures_util::future::BoxFuture;
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, ready};

/// A boxed future of the stage's slow paths (deferring, lookups, retries).
pub(crate) type Boxed<R> = BoxFuture<'static, Result<R, HandlerError>>;

#[pin_project(project = StateProjection)]
enum State<F, R> {
    /// The inner service handles the event; on a transient failure it may
    /// be deferred.
    Calling {
        #[pin]
        future: F,
        origin: Option<Origin>,
    },
    /// A slow path.
    Boxed(Boxed<R>),
    /// The output was returned.
    Done,
}

/// One request through the defer service.
#[pin_project]
pub struct ResponseFuture<F, R, L> {
    #[pin]
    state: State<F, R>,
    shared: Option<Arc<Shared<L>>>,
}

impl<F, R, L> ResponseFuture<F, R, L> {
    /// The inner call of an event from `origin`, deferred if it fails.
    pub(super) fn calling(future: F, shared: Arc<Shared<L>>, origin: Origin) -> Self {
        Self {
            state: State::Calling {
                future,
                origin: Some(origin),
            },
            shared: Some(shared),
        }
    }

    /// A slow path, already boxed.
    pub(super) fn boxed(future: Boxed<R>) -> Self {
        Self {
            state: State::Boxed(future),
            shared: None,
        }
    }
}

impl<F, R, L> Future for ResponseFuture<F, R, L>
where
    F: Future<Output = Result<R, HandlerError>>,
    R: Settlement + Send + 'static,
    L: Send + Sync + 'static,
{
    type Output = Result<R, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProjection::Calling { future, origin } => {
                    let result = ready!(future.poll(cx));
                    let (Some(shared), Some(origin)) = (this.shared.take(), origin.take()) else {
                        this.state.set(State::Done);
                        return Poll::Ready(result);
                    };
                    match failed(&shared, &origin, result) {
                        Failed::Returned(result) => {
                            this.state.set(State::Done);
                            return Poll::Ready(result);
                        }
                        Failed::Defer(error) => {
                            let defer = backlog::defer(shared, origin, error);
                            this.state.set(State::Boxed(defer));
                        }
                    }
                }
                StateProjection::Boxed(future) => {
                    let result = ready!(future.as_mut().poll(cx));
                    this.state.set(State::Done);
                    return Poll::Ready(result);
                }
                StateProjection::Done => {
                    return Poll::Ready(Err(HandlerError::permanent(PolledAfterCompletion)));
                }
            }
        }
    }
}

/// A future polled again after it completed.
#[derive(Debug, thiserror::Error)]
#[error("the defer future was polled after it completed")]
struct PolledAfterCompletion;

/// What to do with the result of an inner call.
pub(super) enum Failed<R> {
    /// Return it as it is (or as an application timer put off).
    Returned(Result<R, HandlerError>),
    /// Defer the record it failed on.
    Defer(HandlerError),
}

/// Counts the result in the gate and decides: a success or a non-transient
/// error returns as is; a transient failure the gate lets through is
/// deferred (a record) or put off (an application timer); any other
/// returns to the retry stage.
pub(super) fn failed<R: Settlement, L>(
    shared: &Shared<L>,
    origin: &Origin,
    result: Result<R, HandlerError>,
) -> Failed<R> {
    let error = match result {
        Ok(response) => {
            shared.record(false);
            return Failed::Returned(Ok(response));
        }
        Err(error) => error,
    };
    let context = origin.context();
    if error.category() != Category::Transient || context.is_shutting_down() {
        return Failed::Returned(Err(error));
    }
    if !shared.record(true) {
        return Failed::Returned(Err(error));
    }
    match (origin, context.work()) {
        (Origin::Record { .. }, _) => Failed::Defer(error),
        // A commit that failed partway may have removed the timer already
        // (its first change): only the retry stage can finish the job.
        (Origin::Timer { .. }, Some(work)) if work.commit_started() => Failed::Returned(Err(error)),
        (Origin::Timer { deferrals, .. }, Some(_)) => {
            let delay = shared.config.backoff().delay(deferrals.saturating_add(1));
            let at = backlog::after(delay, None);
            context.meter().count(Action::Deferred);
            tracing::warn!(%error, key = %context.key(), ?delay, kind = ?TimerKind::Application,
                "timer failed; it runs again after the delay");
            Failed::Returned(Ok(R::put_off(at)))
        }
        (Origin::Timer { .. }, None) => Failed::Returned(Err(error)),
    }
}
