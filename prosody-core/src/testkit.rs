//! Helpers for the unit tests of layers.

use crate::access::PartitionStores;
use crate::broker::TopicPartition;
use crate::clock::Timestamp;
use crate::context::Context;
use crate::event::Headers;
use crate::event::{Event, Message};
use crate::handler::EventRequest;
use crate::key::Key;
use crate::store::Stores;
use bytes::Bytes;
use prosody_memory::MemoryStores;
use std::sync::Arc;
use tokio::sync::mpsc;
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

/// `stores` as the runtime hands a partition's to its stages and contexts:
/// bound to partition 0 of `topic` (the partition of [`message`]), with no
/// task to tell of timer changes.
pub(crate) fn access(stores: impl Stores) -> Arc<PartitionStores> {
    let (notices, _) = mpsc::unbounded_channel();
    Arc::new(PartitionStores::new(
        stores.erase(),
        TopicPartition::new("topic", 0),
        notices,
        Arc::default(),
    ))
}

/// `context` as the runtime makes it: with its event's unit of work, over
/// stores in memory.
pub(crate) fn as_in_runtime(context: Context) -> Context {
    context.with_work(crate::work::UnitOfWork::new(access(MemoryStores::new())))
}
