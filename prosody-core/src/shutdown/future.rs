//! The response future of the shutdown service.

use crate::error::HandlerError;
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

/// Either the inner attempt, or its refusal.
#[pin_project(project = Projection)]
pub enum ResponseFuture<F> {
    /// The partition was shutting down: the attempt did not start.
    Refused(Option<HandlerError>),
    /// The attempt runs.
    Running(#[pin] F),
}

impl<F, R> Future for ResponseFuture<F>
where
    F: Future<Output = Result<R, HandlerError>>,
{
    type Output = Result<R, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        match self.project() {
            Projection::Running(attempt) => attempt.poll(cx),
            Projection::Refused(error) => Poll::Ready(Err(error
                .take()
                .unwrap_or_else(|| HandlerError::transient(ShuttingDown)))),
        }
    }
}

/// An attempt refused because its partition is shutting down.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the partition is shutting down; the event is left to its next owner")]
pub struct ShuttingDown;
