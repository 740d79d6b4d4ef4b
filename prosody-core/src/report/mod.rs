//! Error reporting: each failed handler call handed to a hook of the
//! application (an error tracker, a log, a counter), off the handler's
//! path.
//!
//! [`ReportSink`] is a [`TelemetrySink`]: placed in the telemetry stage,
//! which sees each handler call exactly once, it builds a
//! [`FailureReport`] of each failed call and queues it for a thread of its
//! own, which calls the [`Reporter`]. A hook that is slow, blocks or panics
//! never holds up or fails a handler call.
//!
//! Invariant: each failed handler call is offered exactly once; it is
//! reported unless counted as dropped ([`ReportSink::dropped`]).
//!
//! ```
//! use prosody_core::report::{FailureReport, ReportSink};
//! use prosody_core::telemetry::TelemetryLayer;
//! use prosody_core::{Category, Encoded, EventRequest, HandlerError};
//! use std::sync::mpsc;
//! use std::time::Duration;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! # use prosody_core::{Context, Event, Key, Timer, Timestamp};
//! # fn request(key: &str) -> EventRequest<Encoded> {
//! #     let stop = tokio_util::sync::CancellationToken::new();
//! #     let context = Context::new(Key::from(key), "orders".into(), 0, stop.child_token(), stop);
//! #     EventRequest::new(Event::Timer(Timer::new(key, Timestamp::default())), context)
//! # }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (reports, received) = mpsc::channel();
//! let hook = move |report: &FailureReport| {
//!     let _ = reports.send(report.clone());
//! };
//! let sink = ReportSink::spawn(hook)?;
//! let handler = service_fn(|_: EventRequest<Encoded>| async {
//!     Err::<Option<()>, _>(HandlerError::permanent("no such order"))
//! });
//! let stack = ServiceBuilder::new().layer(TelemetryLayer::new(sink)).service(handler);
//! assert!(stack.oneshot(request("order-7")).await.is_err());
//!
//! let report = received.recv_timeout(Duration::from_secs(10))?;
//! assert_eq!((report.kind, &*report.key), ("timer", "order-7"));
//! assert_eq!(report.category, Category::Permanent);
//! assert_eq!(report.chain, ["no such order"]);
//! # Ok(())
//! # }
//! ```

#[cfg(test)]
mod tests;

use crate::clock::Timestamp;
use crate::error::{Category, HandlerError};
use crate::event::Topic;
use crate::key::Key;
use crate::telemetry::{TelemetryEvent, TelemetrySink};
use std::any::Any;
use std::error::Error as StdError;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use tracing::warn;

/// Reports queued for the hook before new ones are dropped.
pub const QUEUE: usize = 1024;

/// One failed handler call.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailureReport {
    /// `message`, `timer` or `excise`.
    pub kind: &'static str,
    /// The topic of the key's partition.
    pub topic: Topic,
    /// The key's partition.
    pub partition: i32,
    /// The record's offset (none for a timer).
    pub offset: Option<i64>,
    /// The time the timer was scheduled for: when it was due, not when
    /// it failed (none for a message or an excise).
    pub fire_time: Option<Timestamp>,
    /// The key.
    pub key: Key,
    /// The attempt number, from 1.
    pub attempt: u32,
    /// The error's category.
    pub category: Category,
    /// When the call failed.
    pub at: Timestamp,
    /// The error's text, then the text of each of its sources, outermost
    /// first (the category is not part of it).
    pub chain: Vec<String>,
}

impl FailureReport {
    /// The report of the call `event` describes, failed with `error`.
    #[must_use]
    pub fn new(event: &TelemetryEvent, error: &HandlerError) -> Self {
        let mut chain = Vec::new();
        let mut link: Option<&(dyn StdError + 'static)> = Some(error.source());
        while let Some(source) = link {
            chain.push(source.to_string());
            link = source.source();
        }
        Self {
            kind: event.kind,
            topic: event.topic.clone(),
            partition: event.partition,
            offset: event.offset,
            fire_time: event.fire_time,
            key: event.key.clone(),
            attempt: event.attempt,
            category: error.category(),
            at: event.at,
            chain,
        }
    }

    /// The error's own text, the first of [`chain`](Self::chain).
    #[must_use]
    pub fn message(&self) -> &str {
        self.chain.first().map_or("", String::as_str)
    }
}

/// Takes failure reports: the application's hook. It runs on the report
/// thread, one report at a time; it may block (later reports queue, then
/// are dropped), and a panic is caught and counted. A plain closure taking
/// a `&FailureReport` is a reporter.
pub trait Reporter: Send + Sync + 'static {
    /// Takes one report.
    fn report(&self, report: &FailureReport);
}

impl<F: Fn(&FailureReport) + Send + Sync + 'static> Reporter for F {
    fn report(&self, report: &FailureReport) {
        self(report);
    }
}

/// Hands each failed handler call to a [`Reporter`] on a thread of its own.
///
/// Invariant: each failed handler call is offered exactly once; it is
/// reported unless counted as dropped. [`TelemetrySink::failure`] never
/// blocks: the report goes into a queue of 1,024 ([`QUEUE`]); when it is
/// full the report is dropped and counted ([`ReportSink::dropped`]), with
/// a warning at each power of two. A hook that panics is caught, counted
/// ([`ReportSink::panics`]) and logged, and the thread goes on with the
/// next report. The thread ends when the last clone of the sink is
/// dropped, after reporting what was queued (reports still queued when
/// the process exits are lost).
#[derive(Clone)]
pub struct ReportSink {
    queue: SyncSender<FailureReport>,
    counts: Arc<Counts>,
}

/// What the sink and its thread count.
#[derive(Default)]
struct Counts {
    dropped: AtomicU64,
    panics: AtomicU64,
}

impl ReportSink {
    /// A sink handing reports to `hook`, with its report thread started.
    ///
    /// # Errors
    ///
    /// The thread could not be started.
    pub fn spawn(hook: impl Reporter) -> std::io::Result<Self> {
        let (queue, reports) = mpsc::sync_channel(QUEUE);
        let counts = Arc::new(Counts::default());
        let shared = Arc::clone(&counts);
        std::thread::Builder::new()
            .name("prosody-report".to_owned())
            .spawn(move || deliver(&hook, &reports, &shared))?;
        Ok(Self { queue, counts })
    }

    /// Reports dropped so far: the queue was full.
    #[must_use]
    pub fn dropped(&self) -> u64 {
        self.counts.dropped.load(Ordering::Relaxed)
    }

    /// Reports whose hook panicked so far.
    #[must_use]
    pub fn panics(&self) -> u64 {
        self.counts.panics.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for ReportSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReportSink")
            .field("dropped", &self.dropped())
            .field("panics", &self.panics())
            .finish_non_exhaustive()
    }
}

impl TelemetrySink for ReportSink {
    fn emit(&self, _event: TelemetryEvent) {}

    fn failure(&self, event: &TelemetryEvent, error: &HandlerError) {
        let why = match self.queue.try_send(FailureReport::new(event, error)) {
            Ok(()) => return,
            Err(TrySendError::Full(_)) => "the error-report queue is full",
            Err(TrySendError::Disconnected(_)) => "the error-report thread has stopped",
        };
        let total = self.counts.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if total.is_power_of_two() {
            warn!(dropped = total, "{why}; failure reports dropped");
        }
    }
}

/// The report thread: hands each queued report to `hook`, catching its
/// panics, until every sender is gone and the queue is empty.
fn deliver(hook: &impl Reporter, reports: &Receiver<FailureReport>, counts: &Counts) {
    for report in reports {
        let Err(panic) = catch_unwind(AssertUnwindSafe(|| hook.report(&report))) else {
            continue;
        };
        let total = counts.panics.fetch_add(1, Ordering::Relaxed) + 1;
        if total.is_power_of_two() {
            warn!(
                panics = total,
                kind = report.kind,
                topic = %report.topic,
                "the error reporter panicked: {}",
                text(&*panic)
            );
        }
    }
}

/// What a panic said, when it said it in text.
fn text(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
