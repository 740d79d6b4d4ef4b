//! Request round trips on real Kafka and Cassandra: two answering members
//! in processes of their own, a requester in this one (its answers come
//! over the peer endpoint).
//!
//! `scripts/services start && eval "$(scripts/services env)" &&
//! cargo bench --bench requests`; `REQUESTS_BENCH_ROUNDS` (default 400)
//! round trips per latency figure, `REQUESTS_BENCH_SECONDS` (default 10)
//! for the throughput figure. Without the servers it prints one line.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "a benchmark fails loudly"
)]

#[path = "../tests/requests_real/world.rs"]
#[allow(dead_code, reason = "the suite's parts the benchmark does not use")]
mod world;

use prosody::{ProsodyClient, ReadTtl};
use prosody_conformance::services;
use serde_json::{Value, json};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use world::{HANDLED, MEMBER, World, line, member};

const TIMEOUT: Duration = Duration::from_secs(10);

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Round trips one after another, as milliseconds.
async fn round_trips(
    client: &ProsodyClient,
    world: &World,
    names: &[&str],
    rounds: u64,
) -> Vec<f64> {
    let mut took = Vec::new();
    for n in 0..rounds {
        let started = Instant::now();
        let outcomes = client
            .request::<Value>(&world.topic, format!("key-{n}"), &json!({}), names, TIMEOUT)
            .await
            .unwrap();
        assert!(
            outcomes.values().all(prosody::Outcome::is_success),
            "{outcomes:?}"
        );
        took.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    took.sort_by(f64::total_cmp);
    took
}

/// The `per_mille`th thousandth of `sorted` (nearest rank).
fn percentile(sorted: &[f64], per_mille: usize) -> f64 {
    let at = (sorted.len().saturating_sub(1) * per_mille).div_ceil(1000);
    sorted[at.min(sorted.len() - 1)]
}

async fn bench() -> Option<()> {
    let world = World::new(8).await?;
    let (_billing, billing) = world.spawn((MEMBER, "billing"));
    let (_inventory, inventory) = world.spawn((MEMBER, "inventory"));
    line(&billing, "ready");
    line(&inventory, "ready");
    let client = Arc::new(world.requester().await);
    let rounds = setting("REQUESTS_BENCH_ROUNDS", 400);
    // Warm: connections, the directory entry, the members' caches.
    round_trips(&client, &world, &["billing", "inventory"], 50).await;
    for names in [&["billing"][..], &["billing", "inventory"][..]] {
        let took = round_trips(&client, &world, names, rounds).await;
        println!(
            "round trip, {} subsystem(s), {rounds} requests: p50 {:.2} ms, p99 {:.2} ms",
            names.len(),
            percentile(&took, 500),
            percentile(&took, 990)
        );
    }
    let seconds = setting("REQUESTS_BENCH_SECONDS", 10);
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..64)
        .map(|task| {
            let (client, done, topic) =
                (Arc::clone(&client), Arc::clone(&done), world.topic.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < until {
                    let key = format!("load-{task}-{n}");
                    let outcomes = client
                        .request::<Value>(&topic, key, &json!({}), &["billing"], TIMEOUT)
                        .await
                        .unwrap();
                    assert!(outcomes["billing"].is_success(), "{outcomes:?}");
                    done.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        })
        .collect();
    let started = Instant::now();
    for task in tasks {
        task.await.unwrap();
    }
    #[allow(
        clippy::cast_precision_loss,
        reason = "a count of requests, far below 2^52"
    )]
    let rate = done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    println!("throughput, 64 requests in flight, one subsystem: {rate:.0} requests/s");
    published_reads(&client, &world).await;
    Some(())
}

/// Reads of billing's published counts: through the readers' cache (the
/// default 5 s window), and from the store every time.
async fn published_reads(client: &ProsodyClient, world: &World) {
    let reads = setting("REQUESTS_BENCH_READS", 10_000);
    let direct = ProsodyClient::builder()
        .group_id(services::unique("readers"))
        .cassandra_keyspace(world.keyspace.as_str())
        .state_read_cache(ReadTtl::Off)
        .disable_probe()
        .build()
        .await
        .unwrap();
    let counted = client
        .request::<Value>(
            &world.topic,
            "order-read",
            &json!({}),
            &["billing"],
            TIMEOUT,
        )
        .await
        .unwrap();
    assert!(counted["billing"].is_success(), "{counted:?}");
    for (what, client, reads) in [("cache", client, reads), ("store", &direct, reads / 20)] {
        let handled = client.state("billing", &HANDLED).await.unwrap();
        assert_eq!(handled.get("order-read", "count").await.unwrap(), Some(1));
        let mut took = Vec::new();
        for _ in 0..reads {
            let started = Instant::now();
            handled.get("order-read", "count").await.unwrap();
            took.push(started.elapsed().as_secs_f64() * 1_000_000.0);
        }
        took.sort_by(f64::total_cmp);
        println!(
            "published read from the {what}, {reads} reads: p50 {:.1} µs, p99 {:.1} µs",
            percentile(&took, 500),
            percentile(&took, 990)
        );
    }
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if let Ok(subsystem) = std::env::var(MEMBER) {
        return runtime.block_on(member(subsystem));
    }
    runtime.block_on(bench());
    ExitCode::SUCCESS
}
