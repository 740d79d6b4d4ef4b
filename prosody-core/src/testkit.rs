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
    (EventRequest { event, context }, shutdown, cancel)
}
