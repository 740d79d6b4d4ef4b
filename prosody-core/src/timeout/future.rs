//! The response future of the timeout service.

use super::ReturnedLate;
use crate::error::HandlerError;
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, ready};
use std::time::Duration;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

/// An attempt racing its deadline, then its grace.
#[pin_project]
pub struct ResponseFuture<F> {
    #[pin]
    attempt: F,
    /// The deadline, then the end of the grace.
    #[pin]
    timer: Sleep,
    timeout: Duration,
    /// `Some` until the deadline passes: the grace that follows it.
    grace: Option<Duration>,
    /// Fires the attempt's cancellation at the deadline.
    deadline: CancellationToken,
}

impl<F> ResponseFuture<F> {
    pub(super) fn new(
        attempt: F,
        timeout: Duration,
        grace: Duration,
        deadline: CancellationToken,
    ) -> Self {
        Self {
            attempt,
            timer: tokio::time::sleep(timeout),
            timeout,
            grace: Some(grace),
            deadline,
        }
    }
}

/// An attempt ran past its deadline and its grace, and was dropped.
#[derive(Debug, thiserror::Error)]
#[error("the handler did not finish within {0:?} and was dropped after its grace")]
pub struct Elapsed(pub Duration);

impl<F, R> Future for ResponseFuture<F>
where
    F: Future<Output = Result<R, HandlerError>>,
{
    type Output = Result<R, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            // In the grace a success does not count (the handler service
            // has not written what it staged); an error keeps its category.
            if let Poll::Ready(result) = this.attempt.as_mut().poll(cx) {
                let late = this.grace.is_none();
                return Poll::Ready(match result {
                    Ok(_) if late => Err(HandlerError::transient(ReturnedLate)),
                    result => result,
                });
            }
            ready!(this.timer.as_mut().poll(cx));
            let Some(grace) = this.grace.take() else {
                return Poll::Ready(Err(HandlerError::transient(Elapsed(*this.timeout))));
            };
            this.deadline.cancel();
            this.timer.as_mut().reset(Instant::now() + grace);
            // The attempt is polled again: it may return at once.
        }
    }
}
