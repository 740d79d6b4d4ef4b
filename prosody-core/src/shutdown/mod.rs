//! Shutdown: once a partition that is being handed off has spent most of
//! its shutdown budget (or at once, when it was revoked), no new attempt
//! starts.
//!
//! Invariant: a call made after the context started stopping
//! ([`Context::is_stopping`](crate::Context::is_stopping), at 90% of
//! `shutdown_timeout` on shutdown, at once on a revocation) never reaches the inner service; it ends with a
//! transient [`ShuttingDown`] error and stays unsettled, so the partition's
//! next owner handles it. Before that a draining partition still runs what
//! it holds. Attempts already running are not touched here: they see
//! cancellation at the same moment.

mod future;
mod layer;
#[cfg(test)]
mod tests;

pub use future::{ResponseFuture, ShuttingDown};
pub use layer::ShutdownLayer;

use crate::error::HandlerError;
use crate::handler::EventRequest;
use std::task::{Context as TaskContext, Poll};
use tower::Service;

/// The shutdown service; see the module documentation.
#[derive(Clone, Debug)]
pub struct ShutdownService<S> {
    inner: S,
}

impl<S, P> Service<EventRequest<P>> for ShutdownService<S>
where
    S: Service<EventRequest<P>, Error = HandlerError>,
{
    type Response = S::Response;
    type Error = HandlerError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: EventRequest<P>) -> Self::Future {
        if request.context.is_stopping() {
            return ResponseFuture::Refused(Some(HandlerError::transient(ShuttingDown)));
        }
        ResponseFuture::Running(self.inner.call(request))
    }
}
