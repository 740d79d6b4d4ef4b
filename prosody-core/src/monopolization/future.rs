//! The response future of the monopolization service.

use super::{Shared, Tracker};
use crate::error::HandlerError;
use crate::handler::WaitMeter;
use pin_project::{pin_project, pinned_drop};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, ready};
use std::time::Duration;
use tokio::time::Instant;

/// A measured call: whose time it is and when it began.
struct Measure {
    shared: Arc<Shared>,
    tracker: Arc<Tracker>,
    begin: Instant,
    /// The time the call spent waiting for a scheduler permit, which is
    /// not the key's execution time: what the meter gained since `waited`.
    wait: WaitMeter,
    waited: Duration,
}

#[pin_project(project = StateProjection)]
enum State<F> {
    /// The key is over its budget: fails at once.
    Rejected(Option<HandlerError>),
    /// The inner call runs; its time is counted when it completes (unless
    /// detection is disabled).
    Running {
        #[pin]
        inner: F,
        measure: Option<Measure>,
    },
}

/// One request through the monopolization service.
#[pin_project(PinnedDrop)]
pub struct ResponseFuture<F> {
    #[pin]
    state: State<F>,
}

#[pinned_drop]
impl<F> PinnedDrop for ResponseFuture<F> {
    /// A call dropped before it ended adds no time, but it may be the last
    /// holder of a tracker the cache let go of: then it puts it back.
    fn drop(self: Pin<&mut Self>) {
        if let StateProjection::Running { measure, .. } = self.project().state.project()
            && let Some(Measure {
                shared,
                tracker,
                begin,
                ..
            }) = measure.take()
        {
            shared.record(tracker, begin, Duration::ZERO);
        }
    }
}

impl<F> ResponseFuture<F> {
    pub(super) fn passing(inner: F) -> Self {
        Self {
            state: State::Running {
                inner,
                measure: None,
            },
        }
    }

    pub(super) fn rejected(error: HandlerError) -> Self {
        Self {
            state: State::Rejected(Some(error)),
        }
    }

    pub(super) fn measured(
        inner: F,
        shared: Arc<Shared>,
        tracker: Arc<Tracker>,
        begin: Instant,
        (wait, waited): (WaitMeter, Duration),
    ) -> Self {
        Self {
            state: State::Running {
                inner,
                measure: Some(Measure {
                    shared,
                    tracker,
                    begin,
                    wait,
                    waited,
                }),
            },
        }
    }
}

impl<F, R> Future for ResponseFuture<F>
where
    F: Future<Output = Result<R, HandlerError>>,
{
    type Output = Result<R, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProjection::Rejected(error) => {
                Poll::Ready(Err(error.take().unwrap_or_else(|| {
                    HandlerError::permanent("monopolization future polled after completion")
                })))
            }
            StateProjection::Running { inner, measure } => {
                let output = ready!(inner.poll(cx));
                if let Some(measure) = measure.take() {
                    let Measure {
                        shared,
                        tracker,
                        begin,
                        wait,
                        waited,
                    } = measure;
                    let waited = wait.waited().saturating_sub(waited);
                    let ran = Instant::now()
                        .saturating_duration_since(begin)
                        .saturating_sub(waited);
                    shared.record(tracker, begin, ran);
                }
                Poll::Ready(output)
            }
        }
    }
}

impl<F> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Rejected(_) => "rejected",
            State::Running { measure: None, .. } => "passing",
            State::Running { .. } => "measured",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
