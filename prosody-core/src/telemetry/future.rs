//! The response future of the telemetry service.

use super::{Lifecycle, TelemetryEvent, TelemetrySink};
use crate::clock;
use crate::error::{Category, HandlerError};
use crate::metrics::{Ending, PartitionMeter};
use pin_project::{pin_project, pinned_drop};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, ready};
use tokio::time::Instant;

/// What a call is measured by: its partition's meter, its kind, and its
/// attempt's deadline (to tell a call cancelled by it from one dropped).
pub(super) struct Measure {
    pub(super) meter: PartitionMeter,
    pub(super) kind: &'static str,
    pub(super) deadline: Option<Instant>,
}

/// A call that reports how it ended: its outcome when it completes,
/// `Abandoned` when it is dropped first; and records its duration in its
/// partition's meter.
#[pin_project(PinnedDrop)]
pub struct ResponseFuture<F, T: TelemetrySink> {
    #[pin]
    attempt: F,
    sink: T,
    /// The dispatched event, reused for the outcome; `None` when the sink
    /// takes nothing.
    event: Option<TelemetryEvent>,
    /// `None` when metrics are off.
    measure: Option<Measure>,
    /// When the call began; `None` once reported, or when nothing wants it
    /// (and the clock is not read).
    started: Option<Instant>,
}

/// The end of a call, from one clock reading: when it ended, how long it
/// took, and its wall-clock time.
fn ended(started: Instant) -> (Instant, std::time::Duration, crate::clock::Timestamp) {
    let now = Instant::now();
    (now, now.saturating_duration_since(started), clock::at(now))
}

impl<F, T: TelemetrySink> ResponseFuture<F, T> {
    pub(super) fn new(
        attempt: F,
        sink: T,
        event: Option<TelemetryEvent>,
        measure: Option<Measure>,
        started: Option<Instant>,
    ) -> Self {
        Self {
            attempt,
            sink,
            event,
            measure,
            started,
        }
    }
}

fn outcome(category: Category) -> Ending {
    match category {
        Category::Transient => Ending::Transient,
        Category::Permanent => Ending::Permanent,
        Category::Terminal => Ending::Terminal,
    }
}

impl<F, T, R> Future for ResponseFuture<F, T>
where
    F: Future<Output = Result<R, HandlerError>>,
    T: TelemetrySink,
{
    type Output = Result<R, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.attempt.poll(cx));
        let Some(started) = this.started.take() else {
            return Poll::Ready(result);
        };
        let (_, elapsed, at) = ended(started);
        if let Some(measure) = this.measure.as_ref() {
            let ended = match &result {
                Ok(_) => Ending::Success,
                Err(error) => outcome(error.category()),
            };
            measure.meter.processed(measure.kind, ended, elapsed);
        }
        if let Some(mut event) = this.event.take() {
            event.lifecycle = match &result {
                Ok(_) => Lifecycle::Succeeded { elapsed },
                Err(error) => Lifecycle::Failed {
                    category: error.category(),
                    elapsed,
                },
            };
            event.at = at;
            if let Err(error) = &result {
                this.sink.failure(&event, error);
            }
            this.sink.emit(event);
        }
        Poll::Ready(result)
    }
}

#[pinned_drop]
impl<F, T: TelemetrySink> PinnedDrop for ResponseFuture<F, T> {
    fn drop(self: Pin<&mut Self>) {
        let this = self.project();
        let Some(started) = this.started.take() else {
            return;
        };
        let (now, elapsed, at) = ended(started);
        if let Some(measure) = this.measure.as_ref() {
            let expired = measure.deadline.is_some_and(|deadline| now >= deadline);
            let ended = if expired {
                Ending::Cancelled
            } else {
                Ending::Dropped
            };
            measure.meter.processed(measure.kind, ended, elapsed);
        }
        if let Some(mut event) = this.event.take() {
            event.lifecycle = Lifecycle::Abandoned { elapsed };
            event.at = at;
            this.sink.emit(event);
        }
    }
}
