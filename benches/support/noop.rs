//! The handler and the messages of the stack benches: a handler that does
//! nothing, and JSON messages spread over a number of keys.

use bytes::Bytes;
use prosody::{
    Context, Encoded, Event, EventHandler, EventRequest, Excise, HandlerError, Headers, Message,
    Timer, Timestamp,
};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Does nothing with whatever it is given.
pub struct Noop;

impl EventHandler for Noop {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, _: Message<Value>) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// Message `n` on one of `keys` keys, still encoded as the stack carries
/// it; with a fresh id (so dedup looks it up in its store and records it)
/// or without one (dedup passes it).
pub fn message(
    n: u64,
    keys: u64,
    with_id: bool,
    token: &CancellationToken,
) -> EventRequest<Encoded> {
    let key = format!("key-{}", n % keys.max(1));
    let context = Context::new(
        key.as_str().into(),
        "bench".into(),
        0,
        token.child_token(),
        token.clone(),
    );
    let event = Event::Message(Message {
        topic: "bench".into(),
        partition: 0,
        offset: i64::try_from(n).unwrap_or(i64::MAX),
        timestamp: Timestamp::default(),
        raw_key: Some(Bytes::copy_from_slice(key.as_bytes())),
        key: key.into(),
        payload: Encoded,
        raw: Bytes::from(json!({"id": n, "type": "bench.event"}).to_string()),
        id: with_id.then(|| Arc::from(n.to_string())),
        headers: Headers::new(),
    });
    EventRequest::new(event, context)
}
