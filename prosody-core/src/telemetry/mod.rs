//! Telemetry: each handler call runs in a `tracing` span (topic, partition,
//! offset, key, kind, attempt) and emits lifecycle events to a sink.
//!
//! Invariant: for every call the sink receives exactly one `Dispatched`
//! event before the inner service is called and exactly one `Succeeded` or
//! `Failed` (with the error's category) when it completes, or exactly one
//! `Abandoned` if it is dropped first (the timeout stage outside drops an
//! attempt past its deadline). With a disabled sink nothing is
//! built.

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
use std::task::{Context as TaskContext, Poll};
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
    type Future = Instrumented<ResponseFuture<S::Future, T>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: EventRequest<P>) -> Self::Future {
        let context = &request.context;
        let offset = match &request.event {
            Event::Message(message) => Some(message.offset),
            Event::Excise(excise) => Some(excise.offset),
            Event::Timer(_) => None,
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
        let event = self.sink.enabled().then(|| TelemetryEvent {
            lifecycle: Lifecycle::Dispatched,
            kind,
            topic: context.topic().clone(),
            partition: context.partition(),
            offset,
            key: context.key().clone(),
            attempt: context.attempt(),
            demand: context.demand(),
            at: clock::now(),
        });
        if let Some(event) = &event {
            self.sink.emit(event.clone());
        }
        ResponseFuture::new(self.inner.call(request), self.sink.clone(), event).instrument(span)
    }
}
