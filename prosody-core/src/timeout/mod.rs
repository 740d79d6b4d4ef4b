//! Timeout: each attempt has a deadline.
//!
//! Invariant: an attempt that has not finished `timeout` after it started
//! sees its context's cancellation fire (`should_cancel()` true,
//! `on_cancel()` completes), is dropped, and ends with a transient error, so
//! the retry stage tries the event again. Cancellation of the partition
//! still reaches the attempt, whose context is a child of the call's.

mod config;
mod future;
mod layer;
#[cfg(test)]
mod tests;

pub use config::{DEFAULT_STALL_THRESHOLD, TimeoutConfig};
pub use future::{Elapsed, ResponseFuture};
pub use layer::TimeoutLayer;

use crate::error::HandlerError;
use crate::handler::EventRequest;
use std::task::{Context as TaskContext, Poll};
use tower::Service;

/// The timeout service; see the module documentation.
#[derive(Clone, Debug)]
pub struct TimeoutService<S> {
    inner: S,
    config: TimeoutConfig,
}

impl<S> TimeoutService<S> {
    pub(crate) fn new(inner: S, config: TimeoutConfig) -> Self {
        Self { inner, config }
    }
}

impl<S, P> Service<EventRequest<P>> for TimeoutService<S>
where
    S: Service<EventRequest<P>, Error = HandlerError>,
{
    type Response = S::Response;
    type Error = HandlerError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: EventRequest<P>) -> Self::Future {
        let (context, cancel) = request.context.child();
        request.context = context;
        ResponseFuture::new(self.inner.call(request), self.config.timeout, cancel)
    }
}
