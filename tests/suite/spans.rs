//! Trace context across Kafka and timers, with an in-memory span exporter:
//! a message produced inside a span is handled in a child of it (or, with
//! `follows_from`, in a new trace linked to it), and a timer's span links to
//! the span that scheduled it.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use crate::support;
use opentelemetry::trace::{SpanContext, TraceContextExt as _, TracerProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use prosody::{
    ClientBuilder, Context, EventHandler, Excise, HandlerError, JsonCodec, MemoryBroker, Message,
    ProsodyClient, SpanLink, Timer,
};
use serde_json::{Value as Json, json};
use std::time::Duration;
use tokio::sync::mpsc;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// Schedules a timer a second ahead for each message; reports each call.
#[derive(Clone)]
struct Scheduler(mpsc::UnboundedSender<&'static str>);

impl EventHandler for Scheduler {
    type Payload = Json;
    type Output = ();

    async fn on_message(&self, context: Context, _: Message<Json>) -> Result<(), HandlerError> {
        let at = prosody::Timestamp::from_millis(prosody_core::clock::now().as_millis() + 1000);
        context.schedule(at).map_err(HandlerError::transient)?;
        let _ = self.0.send("message");
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        let _ = self.0.send("timer");
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// A client of group `svc` on a fresh in-memory broker, subscribed to its
/// one topic `t`. Its source system is not the group, as a client skips
/// what its own system produced.
fn builder() -> ClientBuilder<JsonCodec> {
    let broker = MemoryBroker::new();
    broker.create_topic("t", 1).unwrap();
    ProsodyClient::builder()
        .broker(broker)
        .group_id("svc")
        .source_system("upstream")
        .subscribed_topics(["t"])
}

/// The handler spans of each kind, and the producing span's context.
struct Traced {
    produced: SpanContext,
    message: SpanData,
    timer: SpanData,
}

async fn run(message_spans: SpanLink) -> Traced {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _default = support::capture(subscriber);

    let client = builder()
        .message_spans(message_spans)
        .build()
        .await
        .unwrap();
    let (calls, mut seen) = mpsc::unbounded_channel();
    client.subscribe(Scheduler(calls)).await.unwrap();

    let span = tracing::info_span!("produce");
    let produced = span.context().span().span_context().clone();
    client
        .send("t", "k", &json!({"n": 1}))
        .instrument(span)
        .await
        .unwrap();
    for expected in ["message", "timer"] {
        let call = tokio::time::timeout(Duration::from_secs(60), seen.recv())
            .await
            .expect("the call before the deadline");
        assert_eq!(call, Some(expected));
    }
    // Every span has ended once the client has drained.
    client.shutdown().await;
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let handled = |kind: &str| {
        spans
            .iter()
            .find(|span| {
                span.name == "prosody.handle"
                    && span
                        .attributes
                        .contains(&KeyValue::new("kind", Value::from(kind.to_owned())))
            })
            .unwrap_or_else(|| panic!("no {kind} span among {spans:#?}"))
            .clone()
    };
    Traced {
        produced,
        message: handled("message"),
        timer: handled("timer"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_message_is_handled_in_a_child_of_its_producing_span() {
    let traced = run(SpanLink::Child).await;
    assert!(traced.produced.is_valid());
    let message = &traced.message;
    assert_eq!(message.span_context.trace_id(), traced.produced.trace_id());
    assert_eq!(message.parent_span_id, traced.produced.span_id());
}

#[tokio::test(start_paused = true)]
async fn with_follows_from_a_message_starts_a_trace_linked_to_its_producer() {
    let traced = run(SpanLink::FollowsFrom).await;
    let message = &traced.message;
    assert_ne!(message.span_context.trace_id(), traced.produced.trace_id());
    let linked: Vec<_> = message
        .links
        .iter()
        .map(|link| link.span_context.span_id())
        .collect();
    assert_eq!(linked, [traced.produced.span_id()]);
}

#[tokio::test(start_paused = true)]
async fn a_timer_span_links_to_the_span_that_scheduled_it() {
    let traced = run(SpanLink::Child).await;
    let timer = &traced.timer;
    let scheduling = &traced.message.span_context;
    assert_ne!(timer.span_context.trace_id(), scheduling.trace_id());
    let linked: Vec<_> = timer
        .links
        .iter()
        .map(|link| (link.span_context.trace_id(), link.span_context.span_id()))
        .collect();
    assert_eq!(linked, [(scheduling.trace_id(), scheduling.span_id())]);
}

/// Fails at once, without waiting, so its call completes on its first
/// poll, where the partition starts it.
#[derive(Clone)]
struct Fails(mpsc::UnboundedSender<()>);

impl EventHandler for Fails {
    type Payload = Json;
    type Output = ();

    async fn on_message(&self, _: Context, _: Message<Json>) -> Result<(), HandlerError> {
        let _ = self.0.send(());
        Err(HandlerError::permanent("rejected"))
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// What the subscriber wrote, shared with the test.
#[derive(Clone, Default)]
struct Written(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Written {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What the stages log while a call is polled (here the best-effort log
/// stage's line for the failure) carries the record's span: its topic,
/// partition, offset and key. Also for a call that completes on its
/// first poll, made where the partition starts it.
#[tokio::test(start_paused = true)]
async fn a_failure_logged_at_once_carries_its_records_span() {
    let written = Written::default();
    let writer = written.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .finish();
    let _default = support::capture(subscriber);

    let client = builder()
        .mode(prosody::Mode::BestEffort)
        .build()
        .await
        .unwrap();
    let (calls, mut seen) = mpsc::unbounded_channel();
    client.subscribe(Fails(calls)).await.unwrap();
    client.send("t", "k-1", &json!({"n": 1})).await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), seen.recv())
        .await
        .expect("the call before the deadline");
    client.shutdown().await;

    let text = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|line| line.contains("the event is dropped"))
        .unwrap_or_else(|| panic!("no line of the log stage in {text}"));
    for field in ["handle{", "topic=t", "partition=0", "offset=0", "key=k-1"] {
        assert!(line.contains(field), "{field} missing from {line:?}");
    }
}
