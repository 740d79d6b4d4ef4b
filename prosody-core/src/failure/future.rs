//! The response future of the failure-topic service.

use super::{FailureConfig, Routing};
use crate::Settlement;
use crate::broker::{BrokerError, Delivery, Producer};
use crate::context::Context;
use crate::error::{Category, HandlerError};
use crate::metrics::Action;
use futures_util::future::BoxFuture;
use pin_project::pin_project;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll, ready};
use tracing::{error, warn};

type Send = BoxFuture<'static, Result<Delivery, BrokerError>>;

#[pin_project(project = StateProjection)]
enum State<F> {
    Calling(#[pin] F),
    /// Routing the failed record (boxed, as only failures get here); once
    /// delivered, the event settles with its failure.
    Producing(Send, HandlerError),
}

/// An attempt whose lasting failure is routed to the failure topic.
#[pin_project]
pub struct ResponseFuture<F, Pr> {
    #[pin]
    state: State<F>,
    producer: Pr,
    config: Arc<FailureConfig>,
    routing: Option<Routing>,
    context: Context,
}

impl<F, Pr> ResponseFuture<F, Pr> {
    pub(super) fn new(
        attempt: F,
        producer: Pr,
        config: Arc<FailureConfig>,
        routing: Option<Routing>,
        context: Context,
    ) -> Self {
        Self {
            state: State::Calling(attempt),
            producer,
            config,
            routing,
            context,
        }
    }
}

impl<F, Pr, R> Future for ResponseFuture<F, Pr>
where
    F: Future<Output = Result<R, HandlerError>>,
    Pr: Producer,
    R: Settlement,
{
    type Output = Result<R, HandlerError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProjection::Calling(attempt) => {
                    let error = match ready!(attempt.poll(cx)) {
                        Ok(response) => return Poll::Ready(Ok(response)),
                        // Terminal stops the partition.
                        Err(error) if error.category() == Category::Terminal => {
                            return Poll::Ready(Err(error));
                        }
                        Err(error) if this.context.is_shutting_down() => {
                            // During a shutdown the event stays unsettled for
                            // the next owner, which routes it: so the error is
                            // transient whatever its category (a permanent one
                            // would settle it, unrouted).
                            return Poll::Ready(Err(HandlerError::transient(format!(
                                "the partition shut down before the failure was routed: {error}"
                            ))));
                        }
                        Err(error) => error,
                    };
                    let Some(routing) = this.routing.take() else {
                        error!(%error, "a timer failed for good; dropped (no record to route)");
                        return Poll::Ready(Ok(R::failed(&error)));
                    };
                    warn!(%error, topic = %this.config.topic, "routing the failed record to the failure topic");
                    let record = routing.into_record(&this.config.topic, &error);
                    let producer = this.producer.clone();
                    let timeout = this.config.send_timeout;
                    let meter = this.context.meter().clone();
                    let send: Send = Box::pin(async move {
                        let delivered = producer.send(record, timeout).await;
                        if delivered.is_ok() {
                            meter.count(Action::FailureSent);
                        }
                        delivered
                    });
                    // Once routed, the record settles with this failure:
                    // a requester waiting for it is told so.
                    this.state.set(State::Producing(send, error));
                }
                StateProjection::Producing(send, error) => {
                    return Poll::Ready(match ready!(send.as_mut().poll(cx)) {
                        Ok(_) => Ok(R::failed(error)),
                        Err(failure) => Err(HandlerError::transient(failure)),
                    });
                }
            }
        }
    }
}
