//! The response future of the log service.

use crate::Settlement;
use crate::context::Context;
use crate::error::{Category, HandlerError};
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, ready};
use tracing::error;

/// An attempt whose failure is logged and settled.
#[pin_project]
pub struct ResponseFuture<F> {
    #[pin]
    attempt: F,
    context: Context,
    kind: &'static str,
}

impl<F> ResponseFuture<F> {
    pub(super) fn new(attempt: F, context: Context, kind: &'static str) -> Self {
        Self {
            attempt,
            context,
            kind,
        }
    }
}

impl<F, R> Future for ResponseFuture<F>
where
    F: Future<Output = Result<R, HandlerError>>,
    R: Settlement,
{
    type Output = Result<R, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match ready!(this.attempt.poll(cx)) {
            Ok(response) => Poll::Ready(Ok(response)),
            // Terminal stops the partition.
            Err(error) if error.category() == Category::Terminal => Poll::Ready(Err(error)),
            // During a shutdown the event stays unsettled for the next owner,
            // whatever failed: the error turns transient (a permanent one
            // would settle it here).
            Err(error) if this.context.is_shutting_down() => Poll::Ready(Err(
                HandlerError::transient(format!("the partition shut down first: {error}")),
            )),
            Err(error) => {
                error!(
                    key = %this.context.key(), kind = *this.kind, category = %error.category(),
                    %error, "handler failed; the event is dropped (best-effort)"
                );
                Poll::Ready(Ok(R::failed(&error)))
            }
        }
    }
}
