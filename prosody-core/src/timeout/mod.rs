//! Timeout: each attempt has a deadline.
//!
//! Invariant: an attempt that has not finished `timeout` after it started
//! sees its context's cancellation fire (`should_cancel()` true,
//! `on_cancel()` completes, [`is_expired`](crate::Context::is_expired)
//! true) and has a grace ([`TimeoutConfig::grace`]: a tenth of `timeout`,
//! at most ten seconds) to return. What it returns then counts as a
//! failure: a success becomes a transient [`ReturnedLate`] (and the handler
//! service writes nothing it staged); an error keeps its category. A
//! success whose unit of work was committed stands, even if the commit
//! ended past the deadline: its changes landed, so it must not run again
//! (the late-success rule, which the unit of work owns and this stage
//! applies to what the attempt returns). An attempt still running at the end of the grace is
//! dropped (telemetry reports it abandoned) and ends with a transient
//! [`Elapsed`]. Either way the mode tries the event again. Cancellation of
//! the partition still reaches the attempt.
//!
//! ```
//! use prosody_core::timeout::{TimeoutConfig, TimeoutLayer};
//! use prosody_core::{Category, Encoded, EventRequest, HandlerError};
//! use std::time::Duration;
//! use tokio::time::Instant;
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
//! // A handler that waits until it is told to stop, then claims success.
//! let patient = service_fn(|request: EventRequest<Encoded>| async move {
//!     request.context.on_cancel().await;
//!     Ok::<_, HandlerError>(Some(()))
//! });
//! let layer = TimeoutLayer::new(TimeoutConfig { timeout: Duration::from_secs(5) });
//! let start = Instant::now();
//! let late = ServiceBuilder::new().layer(layer).service(patient).oneshot(request("order-7")).await;
//! // Past its deadline, a success counts as a transient failure.
//! assert_eq!(late.map_err(|error| error.category()), Err(Category::Transient));
//! assert_eq!(start.elapsed(), Duration::from_secs(5));
//! # Ok(())
//! # }
//! ```

mod config;
mod future;
mod layer;
#[cfg(test)]
mod tests;

pub use crate::work::ReturnedLate;
pub use config::{DEFAULT_STALL_THRESHOLD, MAX_GRACE, TimeoutConfig};
pub use future::{Elapsed, ResponseFuture};
pub use layer::TimeoutLayer;

use crate::error::HandlerError;
use crate::handler::EventRequest;
use std::task::{Context as TaskContext, Poll};
use tokio::time::Instant;
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
        let timeout = self.config.timeout;
        let at = Instant::now().checked_add(timeout);
        if let Some(at) = at {
            request.context = request.context.with_deadline(at);
        }
        let event = request.context.work().cloned();
        let call = self.inner.call(request);
        ResponseFuture::new(call, at, timeout, self.config.grace(), event)
    }
}
