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
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use std::fmt;
use std::str::FromStr;
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
    let context = Span::current().context();
    let span = context.span();
    let span = span.span_context();
    span.is_valid().then(|| traceparent(span))
}

/// Writes the current span's context into `headers`; nothing without one.
pub fn inject(headers: &mut Headers) {
    let context = Span::current().context();
    let span = context.span();
    let span = span.span_context();
    if !span.is_valid() {
        return;
    }
    headers.push(TRACEPARENT, Bytes::from(traceparent(span)));
    let state = span.trace_state().header();
    if !state.is_empty() {
        headers.push(TRACESTATE, Bytes::from(state));
    }
}

/// The remote span context named by `traceparent` (and `tracestate`);
/// `None` when absent or malformed.
#[must_use]
pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let well_formed = version.len() == 2
        && version != "ff"
        && trace.len() == 32
        && span.len() == 16
        && flags.len() == 2
        && (version != "00" || parts.next().is_none());
    if !well_formed {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let state = tracestate
        .and_then(|state| TraceState::from_str(state).ok())
        .unwrap_or_default();
    let context = SpanContext::new(trace, span, TraceFlags::new(flags), true, state);
    context.is_valid().then_some(context)
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

fn traceparent(span: &SpanContext) -> String {
    format!(
        "00-{:032x}-{:016x}-{:02x}",
        span.trace_id(),
        span.span_id(),
        span.trace_flags()
    )
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
