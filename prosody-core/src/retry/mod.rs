//! Retry: a transient failure is tried again after an exponential backoff
//! with jitter, forever (pipeline) or up to `max_retries` (low-latency).
//!
//! Invariants: permanent and terminal errors are never retried; the delay
//! before retry `n` is at least `base * 2^(n-1)` (or the cap), never above
//! `max_delay`, and delays never decrease; with `max_retries = Some(m)` the
//! inner service is called at most `m + 1` times per request; a retry wait
//! ends at once when the partition starts shutting down, returning the last
//! error (the event stays unsettled and its next owner handles it).

mod config;
mod future;
mod layer;
#[cfg(test)]
mod tests;

pub use config::{RetryConfig, RetryConfigError};
pub use future::ResponseFuture;
pub use layer::RetryLayer;

use crate::error::HandlerError;
use crate::handler::EventRequest;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use tower::Service;

/// The retry service; see the module documentation.
///
/// The first attempt goes to `inner` at once; the retries, which are rare,
/// go to a clone of `template`, made when the first retry is due. So a
/// request costs no clone of the stack below.
#[derive(Clone, Debug)]
pub struct RetryService<S> {
    inner: S,
    template: Arc<S>,
    config: Arc<RetryConfig>,
}

impl<S: Clone> RetryService<S> {
    pub(crate) fn new(inner: S, config: Arc<RetryConfig>) -> Self {
        Self {
            template: Arc::new(inner.clone()),
            inner,
            config,
        }
    }
}

impl<S, P> Service<EventRequest<P>> for RetryService<S>
where
    S: Service<EventRequest<P>, Error = HandlerError> + Clone,
    P: Clone,
{
    type Response = S::Response;
    type Error = HandlerError;
    type Future = ResponseFuture<S, P>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: EventRequest<P>) -> Self::Future {
        // `inner` is ready (this service's readiness is its): it makes the
        // first attempt now.
        let first = self.inner.call(request.clone());
        ResponseFuture::new(
            Arc::clone(&self.template),
            request,
            Arc::clone(&self.config),
            first,
        )
    }
}
