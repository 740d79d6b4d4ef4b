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
//!
//! ```
//! use prosody_core::broker::{BrokerError, Delivery, OutgoingRecord, Producer};
//! use prosody_core::failure::{CATEGORY_HEADER, FailureConfig, FailureLayer};
//! use prosody_core::{Encoded, Event, EventRequest, HandlerError, Response};
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! # use prosody_core::{Context, Headers, Key, Message, Timestamp};
//! # fn message(key: &str) -> EventRequest<Encoded> {
//! #     let stop = tokio_util::sync::CancellationToken::new();
//! #     let context = Context::new(Key::from(key), "orders".into(), 0, stop.child_token(), stop);
//! #     let message = Message {
//! #         topic: "orders".into(), partition: 0, offset: 41, timestamp: Timestamp::default(),
//! #         key: Key::from(key), raw_key: Some(key.as_bytes().to_vec().into()), payload: Encoded::new(),
//! #         raw: b"{}".to_vec().into(), id: None, headers: Headers::new(),
//! #     };
//! #     EventRequest::new(Event::Message(message), context)
//! # }
//!
//! /// Keeps what it is given; a real producer sends it to the broker.
//! #[derive(Clone, Default)]
//! struct Kept(Arc<Mutex<Vec<OutgoingRecord>>>);
//!
//! impl Producer for Kept {
//!     async fn send(&self, record: OutgoingRecord, _: Duration) -> Result<Delivery, BrokerError> {
//!         self.0.lock().map(|mut kept| kept.push(record)).ok();
//!         Ok(Delivery { partition: 0, offset: 0 })
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let kept = Kept::default();
//! let config = FailureConfig { topic: "orders.failed".into(), send_timeout: Duration::from_secs(1) };
//! let failing = service_fn(|_: EventRequest<Encoded>| async {
//!     Err::<Response<()>, _>(HandlerError::permanent("unknown currency"))
//! });
//! let stack = ServiceBuilder::new().layer(FailureLayer::new(kept.clone(), config)).service(failing);
//! let settled = stack.oneshot(message("order-7")).await.map_err(|error| error.to_string())?;
//!
//! // Settled with its failure, not handled.
//! assert_eq!(settled, Response::Failed(Box::new("unknown currency".into())));
//! let routed = kept.0.lock().map_err(|_| "poisoned")?;
//! assert_eq!(&*routed[0].topic, "orders.failed");
//! assert_eq!(routed[0].headers.get_str(CATEGORY_HEADER), Some("permanent"));
//! # Ok(())
//! # }
//! ```

mod future;
mod layer;
#[cfg(test)]
mod tests;

pub use future::ResponseFuture;
pub use layer::FailureLayer;

use crate::Settlement;
use crate::broker::{OutgoingRecord, Producer};
use crate::error::HandlerError;
use crate::event::{Event, Headers, Topic};
use crate::handler::EventRequest;
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
