//! Shutdown: once a partition is being revoked or the client shuts down, no
//! new attempt starts.
//!
//! Invariant: a call made after the context's shutdown signal fired never
//! reaches the inner service; it ends with a transient [`ShuttingDown`]
//! error and stays unsettled, so the partition's next owner handles it.
//! Attempts already running are not touched here: they run freely until the
//! runtime fires cancellation near the end of `shutdown_timeout`.

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
        if request.context.is_shutting_down() {
            return ResponseFuture::Refused(Some(HandlerError::transient(ShuttingDown)));
        }
        ResponseFuture::Running(self.inner.call(request))
    }
}
