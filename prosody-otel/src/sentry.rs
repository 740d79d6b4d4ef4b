//! Failed handler calls to Sentry (the `sentry` feature).
//!
//! [`SentryReporter`] is an error reporter
//! (`prosody::ClientBuilder::error_reporter`)
//! that captures each failed handler call as a Sentry event, only when the
//! application has initialised Sentry (with the `sentry` crate, 0.49): the
//! hub it reports to has an enabled client. It never initialises Sentry,
//! and it runs on the report thread, so Sentry never holds up or fails
//! handling.
//!
//! Each event has the tags `prosody.event_type` (`message`, `timer` or
//! `excise`), `prosody.error_class` (`transient`, `permanent` or
//! `terminal`) and `prosody.topic`; the context `prosody` (topic,
//! partition, offset for a message or an excise, `fire_time` for a timer:
//! the time it was scheduled for, in RFC 3339, key, attempt); and the
//! error chain as its exceptions, the handler's error last, as Sentry
//! orders a chain.
//!
//! A client takes it as its hook,
//! `ProsodyClient::builder().error_reporter(SentryReporter::new())`:
//!
//! ```
//! use prosody_core::report::Reporter;
//! use prosody_otel::sentry::SentryReporter;
//!
//! fn hook(_: impl Reporter) {}
//!
//! // With `let _guard = sentry::init(...)` first in `main`; without it,
//! // nothing is captured.
//! hook(SentryReporter::new());
//! ```

use prosody_core::Category;
use prosody_core::clock::Timestamp;
use prosody_core::report::{FailureReport, Reporter};
use sentry_core::Hub;
use sentry_core::protocol::{Context, Event, Exception, Level, Map, Value};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Captures failed handler calls in Sentry; see the [module](self).
#[derive(Clone, Debug, Default)]
pub struct SentryReporter {
    /// The hub to report to; `None` for the process's main hub, read at
    /// each report.
    hub: Option<Arc<Hub>>,
}

impl SentryReporter {
    /// Reports to the process's main hub ([`Hub::main`]), the one
    /// `sentry::init` sets up when called on the thread that first used
    /// Sentry (usually at the start of `main`). It is read at each report,
    /// so Sentry initialised after the client is built is used too.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Reports to `hub`.
    #[must_use]
    pub fn with_hub(hub: Arc<Hub>) -> Self {
        Self { hub: Some(hub) }
    }

    /// The Sentry event of `report`.
    #[must_use]
    pub fn event(report: &FailureReport) -> Event<'static> {
        let class = match report.category {
            Category::Transient => "transient",
            Category::Permanent => "permanent",
            Category::Terminal => "terminal",
        };
        let mut tags = Map::new();
        tags.insert("prosody.event_type".to_owned(), report.kind.to_owned());
        tags.insert("prosody.error_class".to_owned(), class.to_owned());
        tags.insert("prosody.topic".to_owned(), report.topic.to_string());
        let mut context = Map::new();
        context.insert("topic".to_owned(), Value::from(&*report.topic));
        context.insert("partition".to_owned(), Value::from(report.partition));
        if let Some(offset) = report.offset {
            context.insert("offset".to_owned(), Value::from(offset));
        }
        if let Some(fire_time) = report.fire_time {
            context.insert("fire_time".to_owned(), Value::from(rfc3339(fire_time)));
        }
        context.insert("key".to_owned(), Value::from(report.key.as_str()));
        context.insert("attempt".to_owned(), Value::from(report.attempt));
        let mut contexts = Map::new();
        contexts.insert("prosody".to_owned(), Context::Other(context));
        let exceptions: Vec<Exception> = report
            .chain
            .iter()
            .enumerate()
            .rev()
            .map(|(depth, text)| Exception {
                ty: if depth == 0 { "HandlerError" } else { "Error" }.to_owned(),
                value: Some(text.clone()),
                ..Exception::default()
            })
            .collect();
        Event {
            level: Level::Error,
            logger: Some("prosody".to_owned()),
            timestamp: system_time(report.at),
            tags,
            contexts,
            exception: exceptions.into(),
            ..Event::default()
        }
    }
}

/// `at` as a system time (before the epoch: the epoch).
fn system_time(at: Timestamp) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(at.as_millis()).unwrap_or(0))
}

/// `at` in RFC 3339, to the millisecond.
fn rfc3339(at: Timestamp) -> String {
    humantime::format_rfc3339_millis(system_time(at)).to_string()
}

impl Reporter for SentryReporter {
    fn report(&self, report: &FailureReport) {
        let source = self.hub.clone().unwrap_or_else(Hub::main);
        // A hub of this thread's own, from the top of the source's scopes
        // (its client and the application's tags): scopes are never
        // pushed on a hub another thread uses.
        let hub = Hub::new_from_top(source);
        if hub.client().is_some_and(|client| client.is_enabled()) {
            hub.capture_event(Self::event(report));
        }
    }
}
