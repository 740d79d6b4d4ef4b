//! The telemetry layer.

use super::{NoTelemetry, TelemetryService, TelemetrySink};
use crate::trace::SpanLink;
use tower::Layer;

/// How handler spans relate to their causes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Links {
    /// A message's (or excise's) span to the span that produced it
    /// (`message_spans`, default child).
    pub message: SpanLink,
    /// A timer's span to the span that scheduled it (`timer_spans`,
    /// default follows-from).
    pub timer: SpanLink,
}

impl Default for Links {
    fn default() -> Self {
        Self {
            message: SpanLink::Child,
            timer: SpanLink::FollowsFrom,
        }
    }
}

/// Wraps a service so each call emits lifecycle events and runs in a span
/// tied to its cause (see [`crate::trace`]).
#[derive(Clone, Debug, Default)]
pub struct TelemetryLayer<T = NoTelemetry> {
    sink: T,
    links: Links,
}

impl<T: TelemetrySink> TelemetryLayer<T> {
    /// A telemetry layer emitting to `sink`, with the default links.
    #[must_use]
    pub fn new(sink: T) -> Self {
        Self {
            sink,
            links: Links::default(),
        }
    }

    /// The same layer, relating spans to their causes by `links`.
    #[must_use]
    pub fn with_links(mut self, links: Links) -> Self {
        self.links = links;
        self
    }
}

impl<S, T: TelemetrySink> Layer<S> for TelemetryLayer<T> {
    type Service = TelemetryService<S, T>;

    fn layer(&self, inner: S) -> TelemetryService<S, T> {
        TelemetryService {
            inner,
            sink: self.sink.clone(),
            links: self.links,
        }
    }
}
