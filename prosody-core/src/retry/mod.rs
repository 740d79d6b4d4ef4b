//! Retry: a transient failure is tried again after an exponential backoff
//! with jitter, forever (pipeline) or up to `max_retries` (low-latency).
//!
//! Invariants: permanent and terminal errors are never retried; the delay
//! before retry `n` is at least `base * 2^(n-1)` (or the cap), never above
//! `max_delay`, and delays never decrease; with `max_retries = Some(m)` the
//! inner service is called at most `m + 1` times per request; a retry wait
//! ends at once when the partition starts shutting down, returning the last
//! error (the event stays unsettled and its next owner handles it).
//!
//! ```
//! use prosody_core::retry::{RetryConfig, RetryLayer};
//! use prosody_core::{Encoded, EventRequest, HandlerError};
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
//! use std::time::Duration;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! # use prosody_core::{Context, Event, Key, Timer, Timestamp};
//! # fn request(key: &str) -> EventRequest<Encoded> {
//! #     let stop = tokio_util::sync::CancellationToken::new();
//! #     let context = Context::new(Key::from(key), "orders".into(), 0, stop.child_token(), stop);
//! #     EventRequest::new(Event::Timer(Timer::new(key, Timestamp::default())), context)
//! # }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), HandlerError> {
//! // Busy twice, then done.
//! let calls = Arc::new(AtomicU32::new(0));
//! let counter = Arc::clone(&calls);
//! let flaky = service_fn(move |_: EventRequest<Encoded>| {
//!     let busy = counter.fetch_add(1, SeqCst) < 2;
//!     async move { if busy { Err(HandlerError::transient("busy")) } else { Ok(Some(())) } }
//! });
//! let config = RetryConfig { base: Duration::from_millis(50), max_retries: Some(3), ..RetryConfig::default() };
//! let stack = ServiceBuilder::new().layer(RetryLayer::new(config)).service(flaky);
//! assert_eq!(stack.oneshot(request("order-7")).await?, Some(()));
//! assert_eq!(calls.load(SeqCst), 3);
//! # Ok(())
//! # }
//! ```

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
/// go to a clone of the shared template, made when the first retry is
/// due. So a request costs no clone of the stack below.
#[derive(Clone, Debug)]
pub struct RetryService<S> {
    inner: S,
    shared: Arc<Shared<S>>,
}

/// What every request of one retry service shares.
#[derive(Debug)]
pub(crate) struct Shared<S> {
    /// What the retries' service is cloned from.
    template: S,
    config: Arc<RetryConfig>,
}

impl<S: Clone> RetryService<S> {
    pub(crate) fn new(inner: S, config: Arc<RetryConfig>) -> Self {
        Self {
            shared: Arc::new(Shared {
                template: inner.clone(),
                config,
            }),
            inner,
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
        // The first attempt takes the request itself (a payload's parse,
        // which a clone does not carry, goes with it); the clone stays for
        // the retries.
        let kept = request.clone();
        let first = self.inner.call(request);
        ResponseFuture::new(Arc::clone(&self.shared), kept, first)
    }
}
