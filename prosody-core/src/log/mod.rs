//! Log: best-effort mode's failure path. A failed event is logged once, with
//! its category, and settled; nothing retries it.
//!
//! Invariant: a transient or permanent failure becomes an unhandled
//! settlement, after exactly one error log line. A terminal error passes
//! through: it stops the partition in every mode. So does any failure once
//! the partition is shutting down: a call the scheduler or the shutdown
//! stage turned away never ran, and its next owner must handle it.

mod future;
mod layer;
#[cfg(test)]
mod tests;

pub use future::ResponseFuture;
pub use layer::LogLayer;

use crate::error::HandlerError;
use crate::handler::{EventRequest, Settlement};
use std::task::{Context as TaskContext, Poll};
use tower::Service;

/// The log service; see the module documentation.
#[derive(Clone, Debug)]
pub struct LogService<S> {
    inner: S,
}

impl<S, P> Service<EventRequest<P>> for LogService<S>
where
    S: Service<EventRequest<P>, Error = HandlerError>,
    S::Response: Settlement,
{
    type Response = S::Response;
    type Error = HandlerError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: EventRequest<P>) -> Self::Future {
        let context = request.context.clone();
        let kind = request.event.kind();
        ResponseFuture::new(self.inner.call(request), context, kind)
    }
}
