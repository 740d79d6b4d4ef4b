//! Telemetry: each handler call runs in a `tracing` span (topic, partition,
//! offset, key, kind, attempt) and emits lifecycle events to a sink.
//!
//! Invariant: for every call the sink receives exactly one `Dispatched`
//! event before the inner service is called and exactly one `Succeeded` or
//! `Failed` (with the error's category) when it completes, or exactly one
//! `Abandoned` if it is dropped first (the timeout stage outside drops an
//! attempt past its deadline). With a disabled sink nothing is
//! built.
//!
//! ```
//! use prosody_core::telemetry::{Lifecycle, TelemetryEvent, TelemetryLayer, TelemetrySink};
//! use prosody_core::{Encoded, EventRequest, HandlerError};
//! use std::sync::{Arc, Mutex};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! # use prosody_core::{Context, Event, Key, Timer, Timestamp};
//! # fn request(key: &str) -> EventRequest<Encoded> {
//! #     let stop = tokio_util::sync::CancellationToken::new();
//! #     let context = Context::new(Key::from(key), "orders".into(), 0, stop.child_token(), stop);
//! #     EventRequest::new(Event::Timer(Timer::new(key, Timestamp::default())), context)
//! # }
//!
//! /// Keeps every event; a real sink queues them and returns at once.
//! #[derive(Clone, Default)]
//! struct Kept(Arc<Mutex<Vec<TelemetryEvent>>>);
//!
//! impl TelemetrySink for Kept {
//!     fn emit(&self, event: TelemetryEvent) {
//!         self.0.lock().map(|mut kept| kept.push(event)).ok();
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let kept = Kept::default();
//! let handler = service_fn(|_: EventRequest<Encoded>| async { Ok::<_, HandlerError>(Some(())) });
//! let stack = ServiceBuilder::new().layer(TelemetryLayer::new(kept.clone())).service(handler);
//! stack.oneshot(request("order-7")).await.map_err(|error| error.to_string())?;
//!
//! let events = kept.0.lock().map_err(|_| "poisoned")?;
//! assert_eq!(events[0].lifecycle, Lifecycle::Dispatched);
//! assert!(matches!(events[1].lifecycle, Lifecycle::Succeeded { .. }));
//! assert_eq!((events.len(), &*events[1].key, events[1].kind), (2, "order-7", "timer"));
//! # Ok(())
//! # }
//! ```

mod emitter;
mod future;
mod layer;
mod sink;
#[cfg(test)]
mod tests;

pub use emitter::{NoRuntime, ProducerSink, Unflushed};
pub use future::ResponseFuture;
pub use layer::{Links, TelemetryLayer};
pub use sink::{Lifecycle, NoTelemetry, TelemetryEvent, TelemetrySink};

use crate::clock;
use crate::error::HandlerError;
use crate::event::Event;
use crate::handler::EventRequest;
use crate::trace;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use tokio::time::Instant;
use tower::Service;
use tracing::Instrument;
use tracing::instrument::Instrumented;

/// The telemetry service; see the module documentation.
#[derive(Clone, Debug)]
pub struct TelemetryService<S, T> {
    inner: S,
    sink: T,
    links: Links,
}

impl<S, T, P> Service<EventRequest<P>> for TelemetryService<S, T>
where
    S: Service<EventRequest<P>, Error = HandlerError>,
    T: TelemetrySink,
{
    type Response = S::Response;
    type Error = HandlerError;
    /// Boxed: the stage sits at the bottom of the stack, so each stage
    /// above would copy its state again on every call.
    type Future = Pin<Box<Instrumented<ResponseFuture<S::Future, T>>>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: EventRequest<P>) -> Self::Future {
        let context = &request.context;
        let (offset, fire_time) = match &request.event {
            Event::Message(message) => (Some(message.offset), None),
            Event::Excise(excise) => (Some(excise.offset), None),
            Event::Timer(timer) => (None, Some(timer.time)),
        };
        let kind = request.event.kind();
        let span = tracing::info_span!(
            "prosody.handle",
            kind,
            topic = %context.topic(),
            partition = context.partition(),
            offset,
            key = %context.key(),
            attempt = context.attempt(),
        );
        let (cause, link) = match &request.event {
            Event::Message(message) => (trace::extract(&message.headers), self.links.message),
            Event::Excise(excise) => (trace::extract(&excise.headers), self.links.message),
            Event::Timer(timer) => (
                timer
                    .trace
                    .as_deref()
                    .and_then(|parent| trace::parse(parent, None)),
                self.links.timer,
            ),
        };
        trace::relate(&span, cause, link);
        let measure = context.meter().enabled().then(|| future::Measure {
            meter: context.meter().clone(),
            kind,
            deadline: context.deadline(),
        });
        let enabled = self.sink.enabled();
        // One clock reading for the call's start: its duration's and its
        // dispatched event's.
        let started = (enabled || measure.is_some()).then(Instant::now);
        let event = enabled.then(|| TelemetryEvent {
            lifecycle: Lifecycle::Dispatched,
            kind,
            topic: context.topic().clone(),
            partition: context.partition(),
            offset,
            fire_time,
            key: context.key().clone(),
            attempt: context.attempt(),
            demand: context.demand(),
            at: started.map_or_else(clock::now, clock::at),
        });
        if let Some(event) = &event {
            self.sink.emit(event.clone());
        }
        Box::pin(
            ResponseFuture::new(
                self.inner.call(request),
                self.sink.clone(),
                event,
                measure,
                started,
            )
            .instrument(span),
        )
    }
}
