//! The response future of the timeout service.

use crate::error::HandlerError;
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;

/// An attempt racing its deadline.
#[pin_project]
pub struct ResponseFuture<F> {
    #[pin]
    attempt: F,
    #[pin]
    deadline: Sleep,
    timeout: Duration,
    /// Fires the attempt's cancellation.
    cancel: CancellationToken,
}

impl<F> ResponseFuture<F> {
    pub(super) fn new(attempt: F, timeout: Duration, cancel: CancellationToken) -> Self {
        Self {
            attempt,
            deadline: tokio::time::sleep(timeout),
            timeout,
            cancel,
        }
    }
}

/// An attempt ran past its deadline.
#[derive(Debug, thiserror::Error)]
#[error("the handler did not finish within {0:?}")]
pub struct Elapsed(pub Duration);

impl<F, R> Future for ResponseFuture<F>
where
    F: Future<Output = Result<R, HandlerError>>,
{
    type Output = Result<R, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(result) = this.attempt.poll(cx) {
            return Poll::Ready(result);
        }
        if this.deadline.poll(cx).is_ready() {
            this.cancel.cancel();
            return Poll::Ready(Err(HandlerError::transient(Elapsed(*this.timeout))));
        }
        Poll::Pending
    }
}
