//! Helpers for the unit tests of layers.

use crate::clock::Timestamp;
use crate::context::Context;
use crate::event::Headers;
use crate::event::{Event, Message};
use crate::handler::EventRequest;
use crate::key::Key;
use bytes::Bytes;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A message request for `key` with payload `payload` and optional `id`,
/// plus the partition's shutdown and cancel tokens.
pub(crate) fn message<P>(
    key: &str,
    payload: P,
    id: Option<&str>,
) -> (EventRequest<P>, CancellationToken, CancellationToken) {
    let cancel = CancellationToken::new();
    let shutdown = cancel.child_token();
    let context = Context::new(
        Key::from(key),
        Arc::from("topic"),
        0,
        shutdown.clone(),
        cancel.clone(),
    );
    let event = Event::Message(Message {
        topic: Arc::from("topic"),
        partition: 0,
        offset: 0,
        timestamp: Timestamp::default(),
        key: Key::from(key),
        raw_key: Some(Bytes::copy_from_slice(key.as_bytes())),
        payload,
        id: id.map(Arc::from),
        raw: Bytes::new(),
        headers: Headers::new(),
    });
    (EventRequest::new(event, context), shutdown, cancel)
}

/// A store access that keeps nothing: every call fails as rejected.
pub(crate) struct NoStore;

impl crate::timers::StoreAccess for NoStore {
    fn scheduled<'a>(
        &'a self,
        _: &'a Key,
        _: crate::store::timer::TimerKind,
    ) -> crate::timers::StoreFuture<'a, Vec<Timestamp>> {
        Box::pin(std::future::ready(Err(nothing())))
    }

    fn commit(&self, _: crate::store::Batch) -> crate::timers::StoreFuture<'_, ()> {
        Box::pin(std::future::ready(Err(nothing())))
    }

    fn load(
        &self,
        _: Timestamp,
        _: Timestamp,
    ) -> crate::timers::StoreFuture<'_, Vec<crate::timers::Due>> {
        Box::pin(std::future::ready(Err(nothing())))
    }
}

fn nothing() -> crate::store::StoreError {
    crate::store::StoreError::rejected("the test store keeps nothing")
}

/// `context` as the runtime makes it: with its event's unit of work (over
/// a store that keeps nothing), so its permit waits go to the event's meter.
pub(crate) fn as_in_runtime(context: Context) -> Context {
    context.with_work(crate::work::UnitOfWork::new(Arc::new(NoStore)))
}
