//! The response future of the retry service.

use super::Shared;
use crate::Backoff;
use crate::context::Demand;
use crate::error::{Category, HandlerError};
use crate::handler::EventRequest;
use crate::metrics::Action;
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, ready};
use tokio::time::Sleep;
use tokio_util::sync::WaitForCancellationFutureOwned;
use tower::Service;
use tracing::warn;

#[pin_project(project = StateProjection)]
enum State<F> {
    /// An attempt runs.
    Calling(#[pin] F),
    /// Between two attempts, which is rare: boxed, so a request that
    /// succeeds at once carries none of it.
    Pausing(Pin<Box<Pause>>),
}

/// The wait before the next attempt.
#[pin_project]
struct Pause {
    /// The delay before the next attempt...
    #[pin]
    sleep: Sleep,
    /// ...or the partition's shutdown, whichever comes first.
    #[pin]
    shutdown: WaitForCancellationFutureOwned,
    /// The delay ran out: waiting for the service to be ready.
    slept: bool,
    /// The error the last attempt failed with.
    last_error: HandlerError,
}

/// The attempts at one request.
#[pin_project]
pub struct ResponseFuture<S, P>
where
    S: Service<EventRequest<P>>,
{
    shared: Arc<Shared<S>>,
    /// The retries' service, once the first retry is due.
    service: Option<Box<S>>,
    request: EventRequest<P>,
    /// Retries made so far.
    retries: u32,
    #[pin]
    state: State<S::Future>,
}

impl<S, P> ResponseFuture<S, P>
where
    S: Service<EventRequest<P>>,
{
    pub(super) fn new(shared: Arc<Shared<S>>, request: EventRequest<P>, first: S::Future) -> Self {
        Self {
            shared,
            service: None,
            request,
            retries: 0,
            state: State::Calling(first),
        }
    }
}

impl<S, P> Future for ResponseFuture<S, P>
where
    S: Service<EventRequest<P>, Error = HandlerError> + Clone,
    P: Clone,
{
    type Output = Result<S::Response, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProjection::Calling(attempt) => {
                    let error = match ready!(attempt.poll(cx)) {
                        Ok(response) => return Poll::Ready(Ok(response)),
                        Err(error) => error,
                    };
                    let config = &this.shared.config;
                    let exhausted = config.max_retries.is_some_and(|max| *this.retries >= max);
                    let shutting_down = this.request.context.is_shutting_down();
                    if error.category() != Category::Transient || exhausted || shutting_down {
                        return Poll::Ready(Err(error));
                    }
                    *this.retries += 1;
                    this.request.context.meter().count(Action::Retried);
                    let retry = *this.retries;
                    let jitter = Backoff::jitter(this.request.context.key(), retry);
                    let delay = config.backoff().jittered(retry, jitter);
                    warn!(%error, retry, ?delay, "transient failure; retrying");
                    let pause = Pause {
                        sleep: tokio::time::sleep(delay),
                        shutdown: this.request.context.on_shutdown_owned(),
                        slept: false,
                        last_error: error,
                    };
                    this.state.set(State::Pausing(Box::pin(pause)));
                }
                StateProjection::Pausing(pause) => {
                    let pause = pause.as_mut().project();
                    if !*pause.slept {
                        if pause.shutdown.poll(cx).is_ready() {
                            let error = std::mem::replace(
                                pause.last_error,
                                HandlerError::transient("shutting down"),
                            );
                            return Poll::Ready(Err(error));
                        }
                        ready!(pause.sleep.poll(cx));
                        *pause.slept = true;
                    }
                    let service = this
                        .service
                        .get_or_insert_with(|| Box::new(this.shared.template.clone()));
                    ready!(service.poll_ready(cx))?;
                    let mut request = this.request.clone();
                    request.context = request
                        .context
                        .with_demand(Demand::Failure)
                        .with_attempt(this.request.context.attempt().saturating_add(*this.retries));
                    let attempt = service.call(request);
                    this.state.set(State::Calling(attempt));
                }
            }
        }
    }
}
