//! The response future of [`SchedulerService`](super::SchedulerService).

use super::state::Permit;
use crate::error::HandlerError;
use crate::handler::EventRequest;
use crate::work::{Returned, UnitOfWork};
use pin_project::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, ready};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::WaitForCancellationFutureOwned;
use tower::Service;

/// Completes when the waiting call's partition stops taking attempts.
type Shutdown = WaitForCancellationFutureOwned;

/// Why a call that waited did not run.
#[derive(Debug)]
enum GaveUp {
    /// The partition stopped taking attempts while the call waited.
    Shutdown,
    /// Every service of the scheduler was dropped while the call waited.
    Closed,
    /// The future was polled again after it completed.
    Polled,
}

impl fmt::Display for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Shutdown => "partition stopping: gave up waiting for a scheduler permit",
            Self::Closed => "scheduler closed while the call waited for a permit",
            Self::Polled => "scheduler future polled after completion",
        })
    }
}

impl std::error::Error for GaveUp {}

#[pin_project(project = StageProj)]
enum Stage<S, F, P> {
    /// Waiting for a permit. Boxed: it holds the readied inner service and
    /// the request, and every stage above would copy it on every call,
    /// waiting or not.
    Waiting(Pin<Box<Wait<S, P>>>),
    /// The inner call runs under its permit, which goes back once the
    /// handler succeeded (`returned`), before the call's commit completes.
    Running {
        #[pin]
        future: F,
        permit: Option<Permit>,
        returned: Option<Returned>,
    },
    /// The call may not wait and no permit was free.
    Refused,
    /// Completed: the permit (or the channel) is already released.
    Done,
}

/// A call waiting for its permit.
#[pin_project]
struct Wait<S, P> {
    receiver: oneshot::Receiver<Permit>,
    #[pin]
    shutdown: Shutdown,
    call: Option<(S, EventRequest<P>)>,
    since: Instant,
}

/// The future of one scheduled call: waits for a permit (giving up with a
/// transient error if the partition starts shutting down), then runs the
/// inner call and returns its result.
///
/// Invariant: the permit is released as soon as the inner call completes,
/// or, if sooner, in the poll in which the inner call first waits after
/// the library's handler service reported that the handler succeeded (its
/// commit waits on the stores), and in every other way the future ends
/// (dropped while waiting or running, or unwound by a panic), through the
/// permit's drop. A request without a unit of work, or a call that reaches
/// no handler service of the library, holds the permit until it completes.
#[pin_project]
pub struct ResponseFuture<S, P>
where
    S: Service<EventRequest<P>>,
{
    #[pin]
    stage: Stage<S, S::Future, P>,
}

impl<S, P> ResponseFuture<S, P>
where
    S: Service<EventRequest<P>>,
{
    /// A call that already holds its permit and started its inner call;
    /// `returned` tells when its handler succeeded.
    pub(super) fn running(future: S::Future, permit: Permit, returned: Option<Returned>) -> Self {
        Self {
            stage: Stage::Running {
                future,
                permit: Some(permit),
                returned,
            },
        }
    }

    /// A call that waits for a permit on `receiver`, then calls `service`
    /// (already readied) with `request`.
    pub(super) fn waiting(
        receiver: oneshot::Receiver<Permit>,
        service: S,
        request: EventRequest<P>,
    ) -> Self {
        let shutdown = request.context.on_stopping_owned();
        Self {
            stage: Stage::Waiting(Box::pin(Wait {
                receiver,
                shutdown,
                call: Some((service, request)),
                since: Instant::now(),
            })),
        }
    }

    /// A call refused because its partition is shutting down.
    pub(super) fn refused() -> Self {
        Self {
            stage: Stage::Refused,
        }
    }
}

impl<S, P> Future for ResponseFuture<S, P>
where
    S: Service<EventRequest<P>, Error = HandlerError>,
{
    type Output = Result<S::Response, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut stage = self.project().stage;
        loop {
            match stage.as_mut().project() {
                StageProj::Waiting(wait) => {
                    let wait = wait.as_mut().project();
                    if wait.shutdown.poll(cx).is_ready() {
                        // Dropping the receiver returns a permit that may
                        // already sit in it.
                        stage.set(Stage::Done);
                        return Poll::Ready(Err(HandlerError::transient(GaveUp::Shutdown)));
                    }
                    let permit = ready!(Pin::new(wait.receiver).poll(cx));
                    let (Ok(permit), Some((mut service, request))) = (permit, wait.call.take())
                    else {
                        stage.set(Stage::Done);
                        return Poll::Ready(Err(HandlerError::transient(GaveUp::Closed)));
                    };
                    let waited = wait.since.elapsed();
                    if let Some(meter) = request.wait_meter() {
                        meter.add(waited);
                    }
                    request.context.meter().waited(waited);
                    let returned = request.context.work().map(UnitOfWork::returned);
                    let future = service.call(request);
                    stage.set(Stage::Running {
                        future,
                        permit: Some(permit),
                        returned,
                    });
                }
                StageProj::Running {
                    future,
                    permit,
                    returned,
                } => {
                    let Poll::Ready(output) = future.poll(cx) else {
                        // The handler succeeded and its commit waits on
                        // the stores: the permit goes back now.
                        if returned.as_ref().is_some_and(Returned::get) {
                            drop(permit.take());
                        }
                        return Poll::Pending;
                    };
                    // Releases the permit now, not when the future is dropped.
                    stage.set(Stage::Done);
                    return Poll::Ready(output);
                }
                StageProj::Refused => {
                    stage.set(Stage::Done);
                    return Poll::Ready(Err(HandlerError::transient(GaveUp::Shutdown)));
                }
                StageProj::Done => {
                    return Poll::Ready(Err(HandlerError::transient(GaveUp::Polled)));
                }
            }
        }
    }
}

impl<S, P> fmt::Debug for ResponseFuture<S, P>
where
    S: Service<EventRequest<P>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stage = match self.stage {
            Stage::Waiting(_) => "waiting",
            Stage::Running { .. } => "running",
            Stage::Refused => "refused",
            Stage::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("stage", &stage)
            .finish()
    }
}
