//! The handler and the messages of the stack benches: a handler that does
//! nothing, and JSON messages spread over a number of keys.

use bytes::Bytes;
use opentelemetry::metrics::MeterProvider as _;
use prosody::metrics::{Metrics, PartitionMeter};
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
    meter: &PartitionMeter,
) -> EventRequest<Encoded> {
    let key = format!("key-{}", n % keys.max(1));
    let context = Context::new(
        key.as_str().into(),
        "bench".into(),
        0,
        token.child_token(),
        token.clone(),
    )
    .with_meter(meter.clone());
    let event = Event::Message(Message {
        topic: "bench".into(),
        partition: 0,
        offset: i64::try_from(n).unwrap_or(i64::MAX),
        timestamp: Timestamp::default(),
        raw_key: Some(Bytes::copy_from_slice(key.as_bytes())),
        key: key.into(),
        payload: Encoded::new(),
        raw: Bytes::from(json!({"id": n, "type": "bench.event"}).to_string()),
        id: with_id.then(|| Arc::from(n.to_string())),
        headers: Headers::new(),
    });
    EventRequest::new(event, context)
}

/// The meter of partition 0 of topic `bench`: recording into a meter
/// provider with a reader, as a client's records into the process's, when
/// `BENCH_METRICS=on`, else recording nothing (the context is then what
/// `Context::new` makes).
pub fn meter() -> PartitionMeter {
    static PROVIDER: std::sync::OnceLock<opentelemetry_sdk::metrics::SdkMeterProvider> =
        std::sync::OnceLock::new();
    if std::env::var("BENCH_METRICS").as_deref() != Ok("on") {
        return PartitionMeter::default();
    }
    let provider = PROVIDER.get_or_init(|| {
        let reader = opentelemetry_sdk::metrics::ManualReader::builder().build();
        opentelemetry_sdk::metrics::SdkMeterProvider::builder()
            .with_reader(reader)
            .build()
    });
    Metrics::new(&provider.meter("bench"), "memory", "bench").partition(&"bench".into(), 0)
}
