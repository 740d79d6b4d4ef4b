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

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prosody::{BoxError, Encoded, EventService, HandlerService, MemoryBroker, ProsodyClient};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

#[path = "support/noop.rs"]
mod noop;

use noop::{Noop, message};

const BATCH: u64 = 1_000;

/// Messages go to 10,000 keys: more than the per-key caches hold by
/// default.
const KEYS: u64 = 10_000;

/// Calls one instance of the stack, as a partition does: readiness, then
/// the call, with no clone of the stack per event.
async fn run<S>(mut service: S, iterations: u64, with_id: bool) -> Duration
where
    S: EventService<Encoded>,
{
    let token = CancellationToken::new();
    let meter = noop::meter();
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iterations {
        let chunk = BATCH.min(iterations - done);
        let requests: Vec<_> = (0..chunk)
            .map(|n| message(done + n, KEYS, with_id, &token, &meter))
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
                .broker(MemoryBroker::new())
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
