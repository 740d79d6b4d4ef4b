//! Failed handler calls reach Sentry through `SentryReporter`, with their
//! tags, context and error chain, only when a client is set up; without
//! one nothing is captured and nothing fails. Needs the `sentry` feature:
//! `cargo test --features sentry --test sentry`.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::report::{FailureReport, Reporter};
use prosody::sentry::SentryReporter;
use prosody::telemetry::{Lifecycle, TelemetryEvent};
use prosody::{
    Category, Context, Demand, EventHandler, Excise, HandlerError, MemoryBroker, Message, Mode,
    ProsodyClient, Timer, Timestamp,
};
use sentry_core::protocol::{Context as SentryContext, Event, Level, Value};
use sentry_core::{Client, ClientOptions, Envelope, Hub, Scope, Transport};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// Hands each event the client sends on, instead of sending it.
struct Captured(UnboundedSender<Event<'static>>);

impl Transport for Captured {
    fn send_envelope(&self, envelope: Envelope) {
        if let Some(event) = envelope.event() {
            let _ = self.0.send(event.clone());
        }
    }
}

/// A hub with a client that captures into the returned channel; with a
/// DSN, the client is enabled.
fn hub(dsn: bool) -> (Arc<Hub>, UnboundedReceiver<Event<'static>>) {
    let (events, captured) = unbounded_channel();
    let mut options = ClientOptions::new().transport(Arc::new(Captured(events)));
    if dsn {
        options = options.dsn("https://public@sentry.invalid/1");
    }
    let client = Arc::new(Client::from(options));
    let hub = Hub::new(Some(client), Arc::new(Scope::default()));
    (Arc::new(hub), captured)
}

/// The store an order is in could not be reached.
#[derive(Debug, thiserror::Error)]
#[error("order store unreachable")]
struct Unreachable(#[source] std::io::Error);

/// Fails `order-7` permanently (with a cause) and every other order
/// transiently.
struct Orders;

impl EventHandler for Orders {
    type Payload = serde_json::Value;
    type Output = ();

    async fn on_message(
        &self,
        _: Context,
        order: Message<serde_json::Value>,
    ) -> Result<(), HandlerError> {
        if order.key.as_str() == "order-7" {
            let cause = std::io::Error::other("connection refused");
            return Err(HandlerError::permanent(Unreachable(cause)));
        }
        Err(HandlerError::transient("the payment service is busy"))
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

fn tag<'a>(event: &'a Event<'static>, name: &str) -> Option<&'a str> {
    event.tags.get(name).map(String::as_str)
}

fn context(event: &Event<'static>) -> serde_json::Map<String, Value> {
    match event.contexts.get("prosody") {
        Some(SentryContext::Other(map)) => map.clone().into_iter().collect(),
        other => panic!("no prosody context: {other:?}"),
    }
}

fn chain(event: &Event<'static>) -> Vec<(String, Option<String>)> {
    event
        .exception
        .values
        .iter()
        .map(|exception| (exception.ty.clone(), exception.value.clone()))
        .collect()
}

/// A mock-mode client with a `SentryReporter` on an enabled client: each
/// failed call is one Sentry event.
#[tokio::test]
async fn failed_calls_reach_sentry_with_their_tags_context_and_error_chain() {
    let (hub, mut captured) = hub(true);
    let client = ProsodyClient::builder()
        .broker(MemoryBroker::new())
        .group_id("shop")
        .source_system("checkout")
        .subscribed_topics(["orders"])
        .mode(Mode::BestEffort)
        .error_reporter(SentryReporter::with_hub(hub))
        .build()
        .await
        .expect("client");
    client.subscribe(Orders).await.expect("subscribed");
    for key in ["order-7", "order-8"] {
        client
            .send("orders", key, &json!({ "type": "order.placed" }))
            .await
            .expect("sent");
    }
    let mut events = Vec::new();
    for _ in 0..2 {
        let event = tokio::time::timeout(Duration::from_secs(30), captured.recv())
            .await
            .expect("an event within 30 s")
            .expect("the transport lives");
        events.push(event);
    }
    client.shutdown().await;
    events.sort_by_key(|event| context(event)["key"].to_string());
    let [permanent, transient] = <[Event<'static>; 2]>::try_from(events).expect("two events");

    assert_eq!(permanent.level, Level::Error);
    assert_eq!(tag(&permanent, "prosody.event_type"), Some("message"));
    assert_eq!(tag(&permanent, "prosody.error_class"), Some("permanent"));
    assert_eq!(tag(&permanent, "prosody.topic"), Some("orders"));
    let place = context(&permanent);
    assert_eq!(place["topic"], json!("orders"));
    assert_eq!(place["key"], json!("order-7"));
    assert_eq!(place["attempt"], json!(1));
    assert!(place["partition"].is_i64() && place["offset"].is_i64());
    assert!(
        !place.contains_key("fire_time"),
        "a message has no fire time"
    );
    assert_eq!(
        chain(&permanent),
        [
            ("Error".to_owned(), Some("connection refused".to_owned())),
            (
                "HandlerError".to_owned(),
                Some("order store unreachable".to_owned())
            ),
        ],
        "the chain, innermost cause first"
    );
    assert_eq!(tag(&transient, "prosody.error_class"), Some("transient"));
    assert_eq!(context(&transient)["key"], json!("order-8"));
    assert_eq!(
        chain(&transient),
        [(
            "HandlerError".to_owned(),
            Some("the payment service is busy".to_owned())
        )]
    );
    assert_eq!(client.dropped_reports(), 0);
}

/// The report of a failed timer call of `key`.
fn timer_report(key: &str) -> FailureReport {
    let event = TelemetryEvent {
        lifecycle: Lifecycle::Failed {
            category: Category::Terminal,
            elapsed: Duration::from_millis(3),
        },
        kind: "timer",
        topic: "reminders".into(),
        partition: 2,
        offset: None,
        fire_time: Some(Timestamp::from_millis(1_699_999_940_000)),
        key: key.into(),
        attempt: 4,
        demand: Demand::Failure,
        at: Timestamp::from_millis(1_700_000_000_000),
    };
    FailureReport::new(&event, &HandlerError::terminal("the ledger is gone"))
}

#[test]
fn a_timer_event_has_no_offset_and_its_time() {
    let (hub, mut captured) = hub(true);
    SentryReporter::with_hub(hub).report(&timer_report("customer-3"));
    let event = captured.try_recv().expect("captured at once");
    assert_eq!(tag(&event, "prosody.event_type"), Some("timer"));
    assert_eq!(tag(&event, "prosody.error_class"), Some("terminal"));
    assert_eq!(
        Value::Object(context(&event)),
        json!({
            "topic": "reminders",
            "partition": 2,
            "fire_time": "2023-11-14T22:12:20.000Z",
            "key": "customer-3",
            "attempt": 4
        })
    );
    let at = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    assert_eq!(event.timestamp, at);
}

/// Without a client, or with one that is not enabled (no DSN), a report
/// captures nothing, and the reporter neither fails nor sets Sentry up.
#[test]
fn without_an_enabled_client_nothing_is_captured_and_nothing_fails() {
    let report = timer_report("customer-4");
    let bare = Arc::new(Hub::new(None, Arc::new(Scope::default())));
    SentryReporter::with_hub(Arc::clone(&bare)).report(&report);
    assert!(bare.client().is_none(), "the reporter set Sentry up");
    // This test binary never initialises the process's hub.
    SentryReporter::new().report(&report);
    assert!(Hub::main().client().is_none(), "the reporter set Sentry up");
    let (disabled, mut captured) = hub(false);
    SentryReporter::with_hub(disabled).report(&report);
    assert!(captured.try_recv().is_err(), "a disabled client captured");
}

/// What the reminder handler saw: the time it scheduled, the time of the
/// timer it ran.
#[derive(Debug, PartialEq)]
enum Reminded {
    Scheduled(Timestamp),
    Failing(Timestamp),
}

/// Schedules a reminder a minute after each order (a whole second); the
/// reminder works for five seconds, then fails for good.
struct Reminders(UnboundedSender<Reminded>);

impl EventHandler for Reminders {
    type Payload = serde_json::Value;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        _: Message<serde_json::Value>,
    ) -> Result<(), HandlerError> {
        let now = prosody_core::clock::now().as_millis();
        let due = Timestamp::from_millis((now / 1000 + 60) * 1000);
        context.schedule(due)?;
        let _ = self.0.send(Reminded::Scheduled(due));
        Ok(())
    }

    async fn on_timer(&self, _: Context, timer: Timer) -> Result<(), HandlerError> {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let _ = self.0.send(Reminded::Failing(timer.time));
        Err(HandlerError::permanent("the reminder cannot be delivered"))
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// A timer whose `on_timer` fails is reported with the time it was
/// scheduled for (in the report and in the Sentry context), apart from the
/// time it failed.
#[tokio::test(start_paused = true)]
async fn a_failed_timer_is_reported_with_its_fire_time() {
    let (reports, received) = std::sync::mpsc::channel();
    let client = ProsodyClient::builder()
        .broker(MemoryBroker::new())
        .group_id("reminders")
        .source_system("shop")
        .subscribed_topics(["orders"])
        .mode(Mode::BestEffort)
        .error_reporter(move |report: &FailureReport| {
            let _ = reports.send(report.clone());
        })
        .build()
        .await
        .expect("client");
    let (seen, mut reminded) = unbounded_channel();
    client.subscribe(Reminders(seen)).await.expect("subscribed");
    client
        .send("orders", "order-9", &json!({ "type": "order.placed" }))
        .await
        .expect("sent");
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(3600), reminded.recv())
            .await
            .expect("the handler within the hour")
            .expect("the handler lives")
    };
    let Reminded::Scheduled(due) = next().await else {
        panic!("the order came first");
    };
    assert_eq!(next().await, Reminded::Failing(due));
    // The report thread runs in real time: wait for it off the paused
    // clock (which stands still meanwhile, nothing left to wait for).
    let report =
        tokio::task::spawn_blocking(move || received.recv_timeout(Duration::from_secs(30)))
            .await
            .expect("the wait ends")
            .expect("a report within 30 s");
    client.shutdown().await;

    assert_eq!((report.kind, report.key.as_str()), ("timer", "order-9"));
    assert_eq!(report.offset, None);
    assert_eq!(report.fire_time, Some(due), "the timer's own time");
    assert!(
        report.at.as_millis() >= due.as_millis() + 5_000,
        "it failed after five seconds of work: {:?} vs {due:?}",
        report.at
    );
    let event = SentryReporter::event(&report);
    let fire_time = std::time::UNIX_EPOCH
        + Duration::from_millis(u64::try_from(due.as_millis()).expect("after the epoch"));
    assert_eq!(
        context(&event)["fire_time"],
        json!(humantime::format_rfc3339_millis(fire_time).to_string())
    );
}
