//! The response future of the retry service.

use super::RetryConfig;
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
    /// Waiting out the delay before the next attempt, or the partition's
    /// shutdown, whichever comes first.
    Waiting {
        #[pin]
        sleep: Sleep,
        #[pin]
        shutdown: WaitForCancellationFutureOwned,
    },
    /// Waiting for the service to be ready for the next attempt.
    Ready,
}

/// The attempts at one request.
#[pin_project]
pub struct ResponseFuture<S, P>
where
    S: Service<EventRequest<P>>,
{
    /// What the retries' service is cloned from.
    template: Arc<S>,
    /// The retries' service, once the first retry is due.
    service: Option<S>,
    request: EventRequest<P>,
    config: Arc<RetryConfig>,
    /// Retries made so far.
    retries: u32,
    last_error: Option<HandlerError>,
    #[pin]
    state: State<S::Future>,
}

impl<S, P> ResponseFuture<S, P>
where
    S: Service<EventRequest<P>>,
{
    pub(super) fn new(
        template: Arc<S>,
        request: EventRequest<P>,
        config: Arc<RetryConfig>,
        first: S::Future,
    ) -> Self {
        Self {
            template,
            service: None,
            request,
            config,
            retries: 0,
            last_error: None,
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
                    let exhausted = this
                        .config
                        .max_retries
                        .is_some_and(|max| *this.retries >= max);
                    let shutting_down = this.request.context.is_shutting_down();
                    if error.category() != Category::Transient || exhausted || shutting_down {
                        return Poll::Ready(Err(error));
                    }
                    *this.retries += 1;
                    this.request.context.meter().count(Action::Retried);
                    let retry = *this.retries;
                    let jitter = Backoff::jitter(this.request.context.key(), retry);
                    let delay = this.config.backoff().jittered(retry, jitter);
                    warn!(%error, retry = *this.retries, ?delay, "transient failure; retrying");
                    *this.last_error = Some(error);
                    let shutdown = this.request.context.on_shutdown_owned();
                    this.state.set(State::Waiting {
                        sleep: tokio::time::sleep(delay),
                        shutdown,
                    });
                }
                StateProjection::Waiting { sleep, shutdown } => {
                    if shutdown.poll(cx).is_ready() {
                        let error = this
                            .last_error
                            .take()
                            .unwrap_or_else(|| HandlerError::transient("shutting down"));
                        return Poll::Ready(Err(error));
                    }
                    ready!(sleep.poll(cx));
                    this.state.set(State::Ready);
                }
                StateProjection::Ready => {
                    let service = this.service.get_or_insert_with(|| S::clone(this.template));
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
