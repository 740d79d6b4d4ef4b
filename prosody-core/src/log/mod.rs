//! Log: best-effort mode's failure path. A failed event is logged once, with
//! its category, and settled; nothing retries it.
//!
//! Invariant: a transient or permanent failure becomes an unhandled
//! settlement, after exactly one error log line. A terminal error passes
//! through: it stops the partition in every mode. So does any failure once
//! the partition is shutting down: a call the scheduler or the shutdown
//! stage turned away never ran, and its next owner must handle it.
//!
//! ```
//! use prosody_core::log::LogLayer;
//! use prosody_core::{Encoded, EventRequest, HandlerError, Response};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! # use prosody_core::{Context, Event, Key, Timer, Timestamp};
//! # fn request(key: &str) -> EventRequest<Encoded> {
//! #     let stop = tokio_util::sync::CancellationToken::new();
//! #     let context = Context::new(Key::from(key), "orders".into(), 0, stop.child_token(), stop);
//! #     EventRequest::new(Event::Timer(Timer::new(key, Timestamp::default())), context)
//! # }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), HandlerError> {
//! let failing = service_fn(|_: EventRequest<Encoded>| async {
//!     Err::<Response<()>, _>(HandlerError::permanent("no such customer"))
//! });
//! let stack = ServiceBuilder::new().layer(LogLayer::new()).service(failing);
//! // Logged once, then settled with its failure.
//! let settled = stack.oneshot(request("order-7")).await?;
//! assert_eq!(settled, Response::Failed(Box::new("no such customer".into())));
//! # Ok(())
//! # }
//! ```

mod future;
mod layer;
#[cfg(test)]
mod tests;

pub use future::ResponseFuture;
pub use layer::LogLayer;

use crate::Settlement;
use crate::error::HandlerError;
use crate::handler::EventRequest;
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
