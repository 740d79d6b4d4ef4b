//! W3C trace context across Kafka and timers: a produced record carries the
//! producing span in its `traceparent` (and `tracestate`) headers, a timer
//! remembers the span that scheduled it, and the handler's span is tied to
//! that cause as a child or by a link ([`SpanLink`]).
//!
//! Spans reach OpenTelemetry through `tracing-opentelemetry`: without its
//! layer in the subscriber, there is no context to carry and all of this
//! does nothing.

use crate::event::Headers;
use bytes::Bytes;
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::{SpanContext, TraceContextExt as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::fmt;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The W3C header naming the producing span.
pub const TRACEPARENT: &str = "traceparent";

/// The W3C header carrying vendor trace state.
pub const TRACESTATE: &str = "tracestate";

/// How a handler's span relates to the span that caused its event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanLink {
    /// A child of the causing span: one trace.
    Child,
    /// A trace of its own, linked to the causing span.
    FollowsFrom,
}

impl fmt::Display for SpanLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Child => "child",
            Self::FollowsFrom => "follows_from",
        })
    }
}

/// The `traceparent` of the current span, if it has a valid context.
#[must_use]
pub fn current() -> Option<String> {
    let mut carrier = Carrier::default();
    TraceContextPropagator::new().inject_context(&Span::current().context(), &mut carrier);
    carrier.traceparent
}

/// Writes the current span's context into `headers` (`traceparent`, and
/// `tracestate` when it has one); nothing without one.
pub fn inject(headers: &mut Headers) {
    let mut carrier = Carrier::default();
    TraceContextPropagator::new().inject_context(&Span::current().context(), &mut carrier);
    if let Some(parent) = carrier.traceparent {
        headers.push(TRACEPARENT, Bytes::from(parent));
        if let Some(state) = carrier.tracestate.filter(|state| !state.is_empty()) {
            headers.push(TRACESTATE, Bytes::from(state));
        }
    }
}

/// The remote span context named by `traceparent` (and `tracestate`);
/// `None` when absent or malformed, as the W3C Trace Context rules say
/// (OpenTelemetry's propagator reads it).
#[must_use]
pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    let carrier = Carrier {
        traceparent: Some(traceparent.to_owned()),
        tracestate: tracestate.map(str::to_owned),
    };
    let context = TraceContextPropagator::new().extract(&carrier);
    let span = context.span().span_context().clone();
    span.is_valid().then_some(span)
}

/// The cause carried by `headers`, if any.
#[must_use]
pub fn extract(headers: &Headers) -> Option<SpanContext> {
    parse(headers.get_str(TRACEPARENT)?, headers.get_str(TRACESTATE))
}

/// Ties `span` (not yet entered) to its `cause`: as its parent, or by a
/// link. Does nothing without a cause or without the OpenTelemetry layer.
pub fn relate(span: &Span, cause: Option<SpanContext>, link: SpanLink) {
    let Some(cause) = cause else {
        return;
    };
    match link {
        SpanLink::Child => {
            // Fails only without the layer, or for a span already started
            // or filtered out: then there is nothing to tie.
            let _ = span.set_parent(Context::new().with_remote_span_context(cause));
        }
        SpanLink::FollowsFrom => span.add_link(cause),
    }
}

/// The two W3C fields, as the propagator writes and reads them.
#[derive(Default)]
struct Carrier {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl Injector for Carrier {
    fn set(&mut self, key: &str, value: String) {
        match key {
            TRACEPARENT => self.traceparent = Some(value),
            TRACESTATE => self.tracestate = Some(value),
            _ => {}
        }
    }
}

impl Extractor for Carrier {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            TRACEPARENT => self.traceparent.as_deref(),
            TRACESTATE => self.tracestate.as_deref(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT, TRACESTATE]
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn parses_only_well_formed_traceparents() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parse(good, Some("vendor=value")).expect("valid");
        assert_eq!(
            format!("{:032x}", context.trace_id()),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(context.is_sampled() && context.is_remote());
        assert_eq!(context.trace_state().get("vendor"), Some("value"));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-xyz92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse(bad, None).is_none(), "{bad:?} accepted");
        }
    }
}
