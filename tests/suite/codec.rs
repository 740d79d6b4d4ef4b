//! A record is parsed once: the runtime's parse of a JSON object, which
//! reads its `id`, is the payload the JSON codec hands the handler; any
//! other payload is decoded from its bytes.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::broker::{Broker, OutgoingRecord, Producer};
use prosody::{
    Codec, CodecError, Context, EventHandler, Excise, HandlerError, JsonCodec, MemoryBroker,
    Message, ProsodyClient, Timer,
};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

const TOPIC: &str = "parsed";

/// The JSON codec, counting how each payload was decoded.
#[derive(Clone, Default)]
struct Counting {
    from_parse: Arc<AtomicUsize>,
    from_bytes: Arc<AtomicUsize>,
}

impl Codec for Counting {
    type Value = Value;

    fn decode(&self, bytes: &[u8]) -> Result<Value, CodecError> {
        self.from_bytes.fetch_add(1, Ordering::SeqCst);
        JsonCodec::<Value>::new().decode(bytes)
    }

    fn encode(&self, value: &Value) -> Result<Vec<u8>, CodecError> {
        JsonCodec::<Value>::new().encode(value)
    }

    fn takes_parsed(&self) -> bool {
        JsonCodec::<Value>::new().takes_parsed()
    }

    fn decode_parsed(&self, parsed: Value, bytes: &[u8]) -> Result<Value, CodecError> {
        self.from_parse.fetch_add(1, Ordering::SeqCst);
        JsonCodec::<Value>::new().decode_parsed(parsed, bytes)
    }
}

#[derive(Clone, Default)]
struct Seen {
    payloads: Arc<Mutex<Vec<Value>>>,
    changed: Arc<Notify>,
}

impl EventHandler for Seen {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, message: Message<Value>) -> Result<(), HandlerError> {
        self.payloads.lock().unwrap().push(message.payload);
        self.changed.notify_one();
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}

#[tokio::test]
async fn a_json_object_is_parsed_once_and_other_payloads_decode_from_their_bytes() {
    let broker = MemoryBroker::new();
    let codec = Counting::default();
    let client = ProsodyClient::builder()
        .codec(codec.clone())
        .broker(broker.clone())
        .group_id("parsed-once")
        .subscribed_topics([TOPIC])
        .build()
        .await
        .unwrap();
    let seen = Seen::default();
    client.subscribe(seen.clone()).await.unwrap();
    let sent = [
        json!({"id": "a-1", "n": 1}),
        json!({"n": 2}),
        json!([1, 2, 3]),
    ];
    let producer = broker.producer().unwrap();
    for (n, payload) in sent.iter().enumerate() {
        let record =
            OutgoingRecord::new(TOPIC, format!("k{n}"), serde_json::to_vec(payload).unwrap());
        producer.send(record, Duration::from_secs(1)).await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(20), async {
        while seen.payloads.lock().unwrap().len() < sent.len() {
            seen.changed.notified().await;
        }
    })
    .await
    .expect("every record handled");
    let mut handled = seen.payloads.lock().unwrap().clone();
    handled.sort_by_key(Value::to_string);
    let mut expected = sent.to_vec();
    expected.sort_by_key(Value::to_string);
    assert_eq!(handled, expected);
    // The two objects were handed over parsed; the array was decoded.
    assert_eq!(
        (
            codec.from_parse.load(Ordering::SeqCst),
            codec.from_bytes.load(Ordering::SeqCst)
        ),
        (2, 1)
    );
    client.shutdown().await;
}
