//! The response future of the defer service.

use super::decide::{Boxed, Failed, failed};
use super::{Origin, Shared, backlog};
use crate::Settlement;
use crate::error::HandlerError;
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, ready};

#[pin_project(project = StateProjection)]
enum State<F, R> {
    /// The inner service handles the event; on a transient failure it may
    /// be deferred.
    Calling {
        #[pin]
        future: F,
        origin: Option<Origin>,
    },
    /// A slow path.
    Boxed(Boxed<R>),
    /// The output was returned.
    Done,
}

/// One request through the defer service.
#[pin_project]
pub struct ResponseFuture<F, R, L> {
    #[pin]
    state: State<F, R>,
    shared: Option<Arc<Shared<L>>>,
}

impl<F, R, L> ResponseFuture<F, R, L> {
    /// The inner call of an event from `origin`, deferred if it fails.
    pub(super) fn calling(future: F, shared: Arc<Shared<L>>, origin: Origin) -> Self {
        Self {
            state: State::Calling {
                future,
                origin: Some(origin),
            },
            shared: Some(shared),
        }
    }

    /// A slow path, already boxed.
    pub(super) fn boxed(future: Boxed<R>) -> Self {
        Self {
            state: State::Boxed(future),
            shared: None,
        }
    }
}

impl<F, R, L> Future for ResponseFuture<F, R, L>
where
    F: Future<Output = Result<R, HandlerError>>,
    R: Settlement + Send + 'static,
    L: Send + Sync + 'static,
{
    type Output = Result<R, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProjection::Calling { future, origin } => {
                    let result = ready!(future.poll(cx));
                    let (Some(shared), Some(origin)) = (this.shared.take(), origin.take()) else {
                        this.state.set(State::Done);
                        return Poll::Ready(result);
                    };
                    match failed(&shared, &origin, result) {
                        Failed::Returned(result) => {
                            this.state.set(State::Done);
                            return Poll::Ready(result);
                        }
                        Failed::Defer(error) => {
                            let defer = backlog::defer(shared, origin, error);
                            this.state.set(State::Boxed(defer));
                        }
                    }
                }
                StateProjection::Boxed(future) => {
                    let result = ready!(future.as_mut().poll(cx));
                    this.state.set(State::Done);
                    return Poll::Ready(result);
                }
                StateProjection::Done => {
                    return Poll::Ready(Err(HandlerError::permanent(PolledAfterCompletion)));
                }
            }
        }
    }
}

/// A future polled again after it completed.
#[derive(Debug, thiserror::Error)]
#[error("the defer future was polled after it completed")]
struct PolledAfterCompletion;
