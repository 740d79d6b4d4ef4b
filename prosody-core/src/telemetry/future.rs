//! The response future of the telemetry service.

use super::{Lifecycle, TelemetryEvent, TelemetrySink};
use crate::clock;
use crate::error::HandlerError;
use pin_project::{pin_project, pinned_drop};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, ready};
use tokio::time::Instant;

/// A call that reports how it ended: its outcome when it completes,
/// `Abandoned` when it is dropped first.
#[pin_project(PinnedDrop)]
pub struct ResponseFuture<F, T: TelemetrySink> {
    #[pin]
    attempt: F,
    sink: T,
    /// The dispatched event, reused for the outcome, and when the call
    /// began; `None` when the sink takes nothing (and the clock is not
    /// read).
    event: Option<(TelemetryEvent, Instant)>,
}

impl<F, T: TelemetrySink> ResponseFuture<F, T> {
    pub(super) fn new(attempt: F, sink: T, event: Option<TelemetryEvent>) -> Self {
        Self {
            attempt,
            sink,
            event: event.map(|event| (event, Instant::now())),
        }
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
        if let Some((mut event, started)) = this.event.take() {
            let elapsed = started.elapsed();
            event.lifecycle = match &result {
                Ok(_) => Lifecycle::Succeeded { elapsed },
                Err(error) => Lifecycle::Failed {
                    category: error.category(),
                    elapsed,
                },
            };
            event.at = clock::now();
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
        if let Some((mut event, started)) = this.event.take() {
            event.lifecycle = Lifecycle::Abandoned {
                elapsed: started.elapsed(),
            };
            event.at = clock::now();
            this.sink.emit(event);
        }
    }
}
