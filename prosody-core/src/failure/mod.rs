//! Failure topic: low-latency mode's failure path. When retries are
//! exhausted or the error is permanent, the original record goes to the
//! failure topic and the event settles.
//!
//! Invariant: a failed message is settled only after the failure topic
//! acknowledged a copy of it (the same key and payload bytes and headers,
//! plus headers naming the error, its category and the source topic,
//! partition and offset); a record that did not decode is routed the same
//! way, as it arrived. If that send fails the result is a transient error, which the
//! outer retry retries, so nothing is dropped. Once the partition is
//! shutting down nothing is routed: the failure passes through and the
//! event stays unsettled for its next owner. A failed excise is routed as
//! a tombstone; a failed timer has no record and is logged and dropped. A
//! terminal error passes through.

mod future;
mod layer;
#[cfg(test)]
mod tests;

pub use future::ResponseFuture;
pub use layer::FailureLayer;

use crate::broker::{OutgoingRecord, Producer};
use crate::error::HandlerError;
use crate::event::{Event, Headers, Topic};
use crate::handler::{EventRequest, Settlement};
use bytes::Bytes;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;
use tower::Service;

/// Header: the error's message.
pub const ERROR_HEADER: &str = "prosody-error";
/// Header: the error's category.
pub const CATEGORY_HEADER: &str = "prosody-error-category";
/// Header: the topic the record came from.
pub const SOURCE_TOPIC_HEADER: &str = "prosody-source-topic";
/// Header: the partition the record came from.
pub const SOURCE_PARTITION_HEADER: &str = "prosody-source-partition";
/// Header: the offset the record had.
pub const SOURCE_OFFSET_HEADER: &str = "prosody-source-offset";

/// Where failed records go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureConfig {
    /// The failure topic (`failure_topic`; required in low-latency mode).
    pub topic: Topic,
    /// How long a send may take (`send_timeout`, default 1s).
    pub send_timeout: Duration,
}

/// What is needed to route one record.
pub(crate) struct Routing {
    topic: Topic,
    partition: i32,
    offset: i64,
    /// The key exactly as it arrived.
    key: Option<Bytes>,
    payload: Option<Bytes>,
    headers: Headers,
}

impl Routing {
    fn into_record(self, failure_topic: &Topic, error: &HandlerError) -> OutgoingRecord {
        let mut headers = self.headers;
        headers.push(ERROR_HEADER, error.source().to_string().into_bytes());
        headers.push(CATEGORY_HEADER, error.category().to_string().into_bytes());
        headers.push(SOURCE_TOPIC_HEADER, self.topic.as_bytes().to_vec());
        headers.push(
            SOURCE_PARTITION_HEADER,
            self.partition.to_string().into_bytes(),
        );
        headers.push(SOURCE_OFFSET_HEADER, self.offset.to_string().into_bytes());
        OutgoingRecord {
            topic: Arc::clone(failure_topic),
            partition: None,
            key: self.key,
            payload: self.payload,
            headers,
            timestamp: None,
        }
    }
}

/// The failure-topic service; see the module documentation.
#[derive(Clone, Debug)]
pub struct FailureService<S, Pr> {
    inner: S,
    producer: Pr,
    config: Arc<FailureConfig>,
}

impl<S, Pr, P> Service<EventRequest<P>> for FailureService<S, Pr>
where
    S: Service<EventRequest<P>, Error = HandlerError>,
    S::Response: Settlement,
    Pr: Producer,
{
    type Response = S::Response;
    type Error = HandlerError;
    type Future = ResponseFuture<S::Future, Pr>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), HandlerError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: EventRequest<P>) -> Self::Future {
        let routing = match &request.event {
            Event::Message(m) => Some(Routing {
                topic: Arc::clone(&m.topic),
                partition: m.partition,
                offset: m.offset,
                key: m.raw_key.clone(),
                payload: Some(m.raw.clone()),
                headers: m.headers.clone(),
            }),
            Event::Excise(e) => Some(Routing {
                topic: Arc::clone(&e.topic),
                partition: e.partition,
                offset: e.offset,
                key: e.raw_key.clone(),
                payload: None,
                headers: e.headers.clone(),
            }),
            Event::Timer(_) => None,
        };
        let context = request.context.clone();
        let attempt = self.inner.call(request);
        ResponseFuture::new(
            attempt,
            self.producer.clone(),
            Arc::clone(&self.config),
            routing,
            context,
        )
    }
}
