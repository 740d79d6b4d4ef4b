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
//!
//! ```
//! use prosody_core::shutdown::{ShutdownLayer, ShuttingDown};
//! use prosody_core::{Context, Encoded, Event, EventRequest, HandlerError, Key, Timer, Timestamp};
//! use tokio_util::sync::CancellationToken;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let handler = service_fn(|_: EventRequest<Encoded>| async { Ok::<_, HandlerError>(Some(())) });
//! let stack = ServiceBuilder::new().layer(ShutdownLayer::new()).service(handler);
//!
//! let stop = CancellationToken::new();
//! let context = Context::new(Key::from("order-7"), "orders".into(), 0, stop.child_token(), stop.clone());
//! let event = Event::Timer(Timer::new("order-7", Timestamp::default()));
//! stop.cancel(); // the partition was revoked
//! let refused = stack.oneshot(EventRequest::new(event, context)).await;
//! assert!(refused.is_err_and(|error| error.source().is::<ShuttingDown>()));
//! # }
//! ```

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
