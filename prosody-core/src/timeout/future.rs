//! The response future of the timeout service.

use crate::error::HandlerError;
use crate::work::{UnitOfWork, late_success};
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, ready};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// An attempt racing its deadline, then its grace.
///
/// The timer is made the first time the attempt waits: an attempt that
/// completes at its first poll never touches the timer wheel.
#[pin_project]
pub struct ResponseFuture<F> {
    #[pin]
    attempt: F,
    /// The deadline, then the end of the grace; made on the first wait.
    timer: Option<Pin<Box<Sleep>>>,
    /// When the attempt's time is up; `None` when too far to count.
    deadline: Option<Instant>,
    timeout: Duration,
    /// `None` once the deadline passed and the grace runs.
    grace: Option<Duration>,
    /// The event's unit of work, which the late-success rule asks whether
    /// the attempt committed.
    event: Option<UnitOfWork>,
}

impl<F> ResponseFuture<F> {
    pub(super) fn new(
        attempt: F,
        deadline: Option<Instant>,
        timeout: Duration,
        grace: Duration,
        event: Option<UnitOfWork>,
    ) -> Self {
        Self {
            attempt,
            timer: None,
            deadline,
            timeout,
            grace: Some(grace),
            event,
        }
    }
}

/// The attempt did not return within its deadline and grace.
#[derive(Debug, thiserror::Error)]
#[error("the handler did not finish within {0:?} and was dropped after its grace")]
pub struct Elapsed(pub Duration);

impl<F, R> Future for ResponseFuture<F>
where
    F: Future<Output = Result<R, HandlerError>>,
{
    type Output = Result<R, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            if let Poll::Ready(result) = this.attempt.as_mut().poll(cx) {
                // An attempt that waited may return as its deadline passes,
                // before this future sees its timer fire. (One that never
                // waited had no timer to miss.)
                let late = this.grace.is_none()
                    || (this.timer.is_some()
                        && this.deadline.is_some_and(|at| Instant::now() >= at));
                let committed = this.event.as_ref().is_some_and(UnitOfWork::committed);
                return Poll::Ready(late_success(result, late, committed));
            }
            let Some(deadline) = *this.deadline else {
                return Poll::Pending;
            };
            let timer = this
                .timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            ready!(timer.as_mut().poll(cx));
            let Some(grace) = this.grace.take() else {
                return Poll::Ready(Err(HandlerError::transient(Elapsed(*this.timeout))));
            };
            // The context's deadline passed with the timer: the handler
            // sees cancellation, and has the grace to return.
            match deadline.checked_add(grace) {
                Some(end) => timer.as_mut().reset(end),
                None => *this.deadline = None,
            }
        }
    }
}
