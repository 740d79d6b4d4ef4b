//! Overhead of the full pipeline stack over the bare handler service, per
//! event, in memory mode.
//!
//! `cargo bench --bench stack`

#![allow(missing_docs)]
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "bench code fails loudly"
)]

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prosody::{
    BoxError, Context, Encoded, Event, EventHandler, EventRequest, EventService, Excise,
    HandlerError, HandlerService, Headers, MemoryBroker, Message, ProsodyClient, Timer, Timestamp,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

const BATCH: u64 = 1_000;

struct Noop;

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

/// A message on one of 10,000 keys; with a fresh id (so dedup looks it up
/// in its store and records it) or without one (dedup passes it).
fn request(n: u64, with_id: bool, token: &CancellationToken) -> EventRequest<Encoded> {
    let key = format!("key-{}", n % 10_000);
    let id: Arc<str> = Arc::from(n.to_string());
    EventRequest {
        context: Context::new(
            key.as_str().into(),
            "bench".into(),
            0,
            token.child_token(),
            token.clone(),
        ),
        event: Event::Message(Message {
            topic: "bench".into(),
            partition: 0,
            offset: i64::try_from(n).unwrap_or(i64::MAX),
            timestamp: Timestamp::default(),
            raw_key: Some(Bytes::copy_from_slice(key.as_bytes())),
            key: key.into(),
            payload: Encoded,
            raw: Bytes::from(json!({"id": n, "type": "bench.event"}).to_string()),
            id: with_id.then_some(id),
            headers: Headers::new(),
        }),
    }
}

/// Calls one instance of the stack, as a partition does: readiness, then
/// the call, with no clone of the stack per event.
async fn run<S>(mut service: S, iterations: u64, with_id: bool) -> Duration
where
    S: EventService<Encoded>,
{
    let token = CancellationToken::new();
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iterations {
        let chunk = BATCH.min(iterations - done);
        let requests: Vec<_> = (0..chunk)
            .map(|n| request(done + n, with_id, &token))
            .collect();
        let start = Instant::now();
        for request in requests {
            let ready = service.ready().await.map_err(Into::into);
            let handled: Result<_, BoxError> = match ready {
                Ok(ready) => ready.call(request).await.map_err(Into::into),
                Err(error) => Err(error),
            };
            handled.expect("handled");
        }
        total += start.elapsed();
        done += chunk;
    }
    total
}

/// A fresh pipeline (fresh dedup cache and store) for each sample, so the
/// figures do not depend on how many samples ran before.
fn pipeline(rt: &tokio::runtime::Runtime) -> impl EventService<Encoded> {
    let client = rt
        .block_on(
            ProsodyClient::builder()
                .memory_broker(MemoryBroker::new())
                .group_id("bench")
                .build(),
        )
        .expect("client");
    client.layers().pipeline(Noop)
}

fn stack(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let mut group = c.benchmark_group("stack");
    group.throughput(Throughput::Elements(1));
    for with_id in [false, true] {
        let label = if with_id { "with_id" } else { "without_id" };
        group.bench_function(format!("bare_handler/{label}"), |b| {
            b.iter_custom(|n| rt.block_on(run(HandlerService::new(Noop), n, with_id)));
        });
        group.bench_function(format!("pipeline/{label}"), |b| {
            b.iter_custom(|n| {
                let stack = pipeline(&rt);
                rt.block_on(run(stack, n, with_id))
            });
        });
    }
    group.finish();
}

criterion_group!(benches, stack);
criterion_main!(benches);
