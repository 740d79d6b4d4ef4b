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
#[derive(Clone, Debug)]
pub struct RetryService<S> {
    inner: S,
    config: Arc<RetryConfig>,
}

impl<S> RetryService<S> {
    pub(crate) fn new(inner: S, config: Arc<RetryConfig>) -> Self {
        Self { inner, config }
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
        // The ready clone makes this attempt; a fresh clone makes the retries.
        let fresh = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, fresh);
        let first = ready.call(request.clone());
        ResponseFuture::new(ready, request, Arc::clone(&self.config), first)
    }
}
