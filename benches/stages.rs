//! What each stage of the pipeline costs, in instructions per event: the
//! handler service with the stages below `STAGES_DEPTH` stacked on it, fed
//! `STAGES_EVENTS` messages over `STAGES_KEYS` keys (10,000: more than the
//! per-key caches hold by default). Run it under callgrind at two event
//! counts and divide the difference by the difference in events; the
//! setup cancels out. Instructions, unlike time, do not drift with the
//! machine's load, so a change of a few percent shows. See BENCHMARKS.md.
//!
//! ```text
//! cargo bench --bench stages --no-run
//! STAGES_DEPTH=8 STAGES_EVENTS=50000 valgrind --tool=callgrind \
//!     --callgrind-out-file=/dev/null target/release/deps/stages-<hash>
//! ```
//!
//! Depths: 0 handler, 1 + telemetry, 2 + timeout, 3 + scheduler,
//! 4 + shutdown, 5 + monopolization, 6 + defer, 7 + retry, 8 + dedup (the
//! pipeline stack).

#![allow(missing_docs)]
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "bench code fails loudly"
)]

use prosody::{Encoded, EventRequest, HandlerError, MemoryBroker, ProsodyClient};
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service, ServiceExt};

#[path = "support/noop.rs"]
mod noop;

use noop::{Noop, message};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |v| v.parse().expect(name))
}

/// Calls `service` once per event, as a partition does: readiness, then
/// the call.
async fn run<S>(mut service: S, events: u64, keys: u64)
where
    S: Service<EventRequest<Encoded>, Error = HandlerError>,
{
    let token = CancellationToken::new();
    let meter = noop::meter();
    for n in 0..events {
        // As the runtime's: no wait meter (the monopolization stage meters
        // a key's waits with its own).
        let request = message(n, keys, false, &token, &meter);
        let call = service.ready().await.expect("ready").call(request);
        if n == 0 {
            // What each move of the stack's future copies.
            eprintln!("the stack's future: {} bytes", size_of_val(&call));
        }
        call.await.expect("handled");
    }
}

fn main() {
    let depth = setting("STAGES_DEPTH", 8);
    let events = setting("STAGES_EVENTS", 10_000);
    let keys = setting("STAGES_KEYS", 10_000).max(1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    rt.block_on(async {
        let client = ProsodyClient::builder()
            .broker(MemoryBroker::new())
            .group_id("bench")
            .build()
            .await
            .expect("client");
        let layers = client.layers();
        let s = layers.handler(Noop);
        if depth == 0 {
            return run(s, events, keys).await;
        }
        let s = layers.telemetry().layer(s);
        if depth == 1 {
            return run(s, events, keys).await;
        }
        let s = layers.timeout().layer(s);
        if depth == 2 {
            return run(s, events, keys).await;
        }
        let s = layers.scheduler().layer(s);
        if depth == 3 {
            return run(s, events, keys).await;
        }
        let s = layers.shutdown().layer(s);
        if depth == 4 {
            return run(s, events, keys).await;
        }
        let s = layers.monopolization().layer(s);
        if depth == 5 {
            return run(s, events, keys).await;
        }
        let s = layers.defer().layer(s);
        if depth == 6 {
            return run(s, events, keys).await;
        }
        let s = layers.retry().layer(s);
        if depth == 7 {
            return run(s, events, keys).await;
        }
        run(layers.dedup().layer(s), events, keys).await;
    });
}
