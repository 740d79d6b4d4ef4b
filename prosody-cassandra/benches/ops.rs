//! Latency of each store operation on the real Cassandra of
//! `scripts/services`: p50 and p99 of one request at a time, then the
//! throughput of dedup reads and attempt commits with many in flight.
//!
//! ```sh
//! scripts/services start && eval "$(scripts/services env)"
//! cargo bench -p prosody-cassandra --bench ops
//! ```
//!
//! `OPS_SAMPLES` (2,000) sets the calls per operation, `OPS_IN_FLIGHT` (32,
//! the default `max_concurrency`) the concurrent calls of the throughput
//! figures.

#![allow(missing_docs)]
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    clippy::cast_precision_loss,
    reason = "bench code fails loudly and prints approximate figures"
)]

use futures_util::StreamExt;
use prosody_cassandra::{CassandraConfig, CassandraStores};
use prosody_conformance::services;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::clock::Timestamp;
use prosody_contracts::key::Key;
use prosody_contracts::store::{
    Batch, DedupKey, DedupStore, DedupWrite, DeferStore, DeferWrite, Deferral, Stores, TimerChange,
    TimerKind, TimerStore,
};
use std::future::Future;
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(3600);

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `op(n)` for `n` in `0..samples`, one at a time, and prints the
/// p50 and p99 of their latencies.
async fn latency<F, Fut, T>(name: &str, samples: usize, op: F)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = T>,
{
    let mut took = Vec::with_capacity(samples);
    for n in 0..samples {
        let start = Instant::now();
        std::hint::black_box(op(n).await);
        took.push(start.elapsed());
    }
    took.sort_unstable();
    // The sample at per mille `q`.
    let at = |q: usize| took[(took.len() * q / 1000).min(took.len() - 1)];
    println!(
        "{name:<46} p50 {:>7.3} ms   p99 {:>7.3} ms",
        at(500).as_secs_f64() * 1e3,
        at(990).as_secs_f64() * 1e3
    );
}

/// Runs `op(n)` for `n` in `0..samples` with `in_flight` at a time and
/// prints the calls per second.
async fn throughput<F, Fut, T>(name: &str, samples: usize, in_flight: usize, op: F)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = T>,
{
    let start = Instant::now();
    let mut calls = futures_util::stream::iter(0..samples)
        .map(&op)
        .buffer_unordered(in_flight);
    while let Some(result) = calls.next().await {
        std::hint::black_box(result);
    }
    println!(
        "{name:<46} {:>8.0} calls/s with {in_flight} in flight",
        samples as f64 / start.elapsed().as_secs_f64()
    );
}

fn key(n: usize) -> Key {
    Key::from(format!("key-{n}"))
}

fn dedup(run: &str, n: usize) -> DedupKey {
    DedupKey::new(run, &format!("key-{n}"), &format!("event-{n}"))
}

fn schedule(n: usize, at: Timestamp) -> Batch {
    Batch::default().timer(
        &key(n),
        TimerKind::Application,
        TimerChange::Schedule {
            time: at,
            trace: None,
        },
    )
}

/// What a pipeline attempt of a record with an `id` and a timer commits.
fn attempt(run: &str, n: usize, at: Timestamp) -> Batch {
    let mut batch = schedule(n, at);
    batch.dedup.push(DedupWrite {
        key: dedup(run, n),
        ttl: TTL,
    });
    batch
}

#[allow(clippy::too_many_lines, reason = "one list of operations")]
async fn run(stores: CassandraStores, run: &str) {
    let samples = setting("OPS_SAMPLES", 2_000);
    let in_flight = setting("OPS_IN_FLIGHT", 32);
    let tp = TopicPartition::new("bench", 0);
    stores.open(&tp).await.unwrap();
    let at = Timestamp::from_millis(prosody_contracts::clock::now().as_millis() + 3_600_000);
    let s = &stores;
    let tp = &tp;

    println!("{samples} calls per operation, one at a time:");
    latency(
        "timer: schedule (a commit of one)",
        samples,
        |n| async move {
            s.commit(tp, schedule(n, at)).await.unwrap();
        },
    )
    .await;
    latency(
        "timer: scheduled (one key's times)",
        samples,
        |n| async move {
            s.scheduled(tp, &key(n), TimerKind::Application)
                .await
                .unwrap()
        },
    )
    .await;
    latency(
        "timer: load (one slab of all those timers)",
        samples.min(50),
        |_| async move {
            s.load(tp, at, Timestamp::from_millis(at.as_millis() + 1_000))
                .await
                .unwrap()
        },
    )
    .await;
    latency(
        "timer: unschedule (a commit of one)",
        samples,
        |n| async move {
            let batch = Batch::default().timer(
                &key(n),
                TimerKind::Application,
                TimerChange::Unschedule { time: at },
            );
            s.commit(tp, batch).await.unwrap();
        },
    )
    .await;
    latency("timer: clear (a commit of one)", samples, |n| async move {
        let batch = Batch::default().timer(&key(n), TimerKind::Application, TimerChange::Clear);
        s.commit(tp, batch).await.unwrap();
    })
    .await;
    latency("defer: defer (a commit of one)", samples, |n| async move {
        let batch = Batch::default().deferral(DeferWrite::Defer {
            key: key(n),
            offset: i64::try_from(n).unwrap(),
            deferral: Deferral::AfterFailure,
        });
        s.commit(tp, batch).await.unwrap();
    })
    .await;
    latency(
        "defer: peek (from what the owner knows)",
        samples,
        |n| async move { s.peek(tp, &key(n)) },
    )
    .await;
    latency(
        "defer: deferred (from the read cache)",
        samples,
        |n| async move { DeferStore::deferred(s, tp, &key(n)).await.unwrap() },
    )
    .await;
    // Forgotten at close: the reads go to Cassandra until the next open.
    stores.close(tp);
    latency(
        "defer: deferred (read from Cassandra)",
        samples,
        |n| async move { DeferStore::deferred(s, tp, &key(n)).await.unwrap() },
    )
    .await;
    latency(
        "defer: open (the partition's deferred keys)",
        samples.min(50),
        |_| async move {
            s.close(tp);
            s.open(tp).await.unwrap();
        },
    )
    .await;
    latency(
        "defer: complete (a commit of one)",
        samples,
        |n| async move {
            let batch = Batch::default().deferral(DeferWrite::Complete {
                key: key(n),
                offset: i64::try_from(n).unwrap(),
            });
            s.commit(tp, batch).await.unwrap();
        },
    )
    .await;
    latency("dedup: contains, a miss", samples, |n| async move {
        s.contains(dedup(run, n)).await.unwrap()
    })
    .await;
    latency("dedup: insert (a commit of one)", samples, |n| async move {
        let mut batch = Batch::default();
        batch.dedup.push(DedupWrite {
            key: dedup(run, n),
            ttl: TTL,
        });
        s.commit(tp, batch).await.unwrap();
    })
    .await;
    latency("dedup: contains, a hit", samples, |n| async move {
        s.contains(dedup(run, n)).await.unwrap()
    })
    .await;
    latency(
        "attempt: dedup record and a timer (one batch)",
        samples,
        |n| async move { s.commit(tp, attempt(run, samples + n, at)).await.unwrap() },
    )
    .await;

    println!("{} calls, {in_flight} at a time:", samples * 5);
    throughput(
        "dedup: contains, a miss",
        samples * 5,
        in_flight,
        |n| async move { s.contains(dedup(run, 10 * samples + n)).await.unwrap() },
    )
    .await;
    throughput(
        "dedup: insert (a commit of one)",
        samples * 5,
        in_flight,
        |n| async move {
            let mut batch = Batch::default();
            batch.dedup.push(DedupWrite {
                key: dedup(run, 20 * samples + n),
                ttl: TTL,
            });
            s.commit(tp, batch).await.unwrap();
        },
    )
    .await;
    throughput(
        "attempt: dedup record and a timer (one batch)",
        samples * 5,
        in_flight,
        |n| async move {
            s.commit(tp, attempt(run, 30 * samples + n, at))
                .await
                .unwrap();
        },
    )
    .await;
    stores.close(tp);
}

fn main() {
    let Some(nodes) = services::server(services::CASSANDRA, "prosody-cassandra/benches/ops.rs")
    else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let keyspace = services::unique("bench");
    let config = CassandraConfig::new(nodes.split(','))
        .keyspace(&keyspace)
        .credentials(
            var("PROSODY_CASSANDRA_USER"),
            var("PROSODY_CASSANDRA_PASSWORD"),
        );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let stores = CassandraStores::connect(&config, "bench").await.unwrap();
        println!("on Cassandra at {nodes}, keyspace {keyspace}");
        run(stores, &keyspace).await;
    });
}
