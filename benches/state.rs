//! Latency of keyed-state store operations, p50 and p99 of one call at a
//! time, on the memory stores and on the real Cassandra of
//! `scripts/services` (skipped, with one line, without it), same run:
//! what a handler's `get`, `set` and `push_back` cost the store.
//!
//! ```sh
//! scripts/services start && eval "$(scripts/services env)"
//! cargo bench --bench state
//! ```
//!
//! `STATE_SAMPLES` (2,000) sets the calls per operation. A `set` is the
//! commit an attempt that set one value makes (the value and the key's
//! applied marker); a `push_back` reads the deque's bounds, then commits
//! the slot, the bounds and the marker. The deque and the map are
//! identified as a handler's are, so Cassandra lays them out in buckets.

#![allow(missing_docs)]
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "bench code fails loudly"
)]

use bytes::Bytes;
use prosody::broker::TopicPartition;
use prosody::store::{Batch, Direction, ItemRange, StateChange, StateWrite, Stores};
use prosody::{Key, MemoryStores};
use prosody_cassandra::{CassandraConfig, CassandraStores};
use prosody_conformance::services;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

async fn latency<F, Fut, T>(backend: &str, name: &str, samples: usize, op: F)
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
    let at = |q: usize| took[(took.len() * q / 1000).min(took.len() - 1)];
    println!(
        "{backend:<10} {name:<40} p50 {:>9.4} ms   p99 {:>9.4} ms",
        at(500).as_secs_f64() * 1e3,
        at(990).as_secs_f64() * 1e3
    );
}

fn key(n: usize) -> Key {
    Key::from(format!("key-{n}"))
}

fn put(collection: &str, n: usize, item: Vec<u8>, value: Vec<u8>) -> StateWrite {
    StateWrite {
        collection: Arc::from(collection),
        key: key(n),
        change: StateChange::Put {
            item: Bytes::from(item),
            value: Bytes::from(value),
        },
        ttl: None,
    }
}

fn marker(n: usize) -> StateWrite {
    put("", n, Vec::new(), (n as u64).to_be_bytes().to_vec())
}

fn commit(state: Vec<StateWrite>) -> Batch {
    Batch {
        state,
        ..Batch::default()
    }
}

async fn run(backend: &str, stores: impl Stores, samples: usize) {
    let tp = TopicPartition::new(services::unique("state_bench"), 0);
    stores.open(&tp).await.unwrap();
    let (s, tp) = (&stores, &tp);
    // Laid out as a handler's collections are: the deque in buckets of
    // 1,024 positions, the map hashed over 16 buckets.
    stores.identify("recent", "deque/json").await.unwrap();
    stores.identify("tags", "map/json").await.unwrap();
    latency(backend, "value get, absent", samples, |n| async move {
        s.cell(tp, "count", &key(n), &[]).await.unwrap()
    })
    .await;
    latency(
        backend,
        "value set (value and marker)",
        samples,
        |n| async move {
            let value = n.to_string().into_bytes();
            s.commit(
                tp,
                commit(vec![put("count", n, Vec::new(), value), marker(n)]),
            )
            .await
            .unwrap();
        },
    )
    .await;
    latency(backend, "value get, present", samples, |n| async move {
        s.cell(tp, "count", &key(n), &[]).await.unwrap()
    })
    .await;
    latency(
        backend,
        "deque push_back (bounds read, commit)",
        samples,
        |n| async move {
            let bounds = s.cell(tp, "recent", &key(n % 100), &[]).await.unwrap();
            let tail = bounds.map_or(0, |b| i64::from_be_bytes(b[8..16].try_into().unwrap()));
            let mut bounds = 0_i64.to_be_bytes().to_vec();
            bounds.extend_from_slice(&(tail + 1).to_be_bytes());
            let slot = (tail.cast_unsigned() ^ (1 << 63)).to_be_bytes().to_vec();
            let writes = vec![
                put("recent", n % 100, slot, b"{\"a\":1}".to_vec()),
                put("recent", n % 100, Vec::new(), bounds),
                marker(n % 100),
            ];
            s.commit(tp, commit(writes)).await.unwrap();
        },
    )
    .await;
    latency(
        backend,
        "deque values, a page of 20",
        samples,
        |n| async move {
            let range = ItemRange {
                from: Bytes::from_static(b"\0"),
                until: None,
            };
            s.cells(tp, "recent", &key(n % 100), &range, Direction::Forward, 64)
                .await
                .unwrap()
        },
    )
    .await;
    latency(
        backend,
        "map set (entry and marker)",
        samples,
        |n| async move {
            let entry = format!("tag-{n:05}").into_bytes();
            let writes = vec![put("tags", n % 100, entry, b"1".to_vec()), marker(n % 100)];
            s.commit(tp, commit(writes)).await.unwrap();
        },
    )
    .await;
    latency(backend, "map get, present", samples, |n| async move {
        let entry = format!("tag-{n:05}").into_bytes();
        s.cell(tp, "tags", &key(n % 100), &entry).await.unwrap()
    })
    .await;
    latency(
        backend,
        "map items, a page of 20 of 16 buckets",
        samples,
        |n| async move {
            let range = ItemRange::all();
            s.cells(tp, "tags", &key(n % 100), &range, Direction::Forward, 64)
                .await
                .unwrap()
        },
    )
    .await;
    stores.close(tp);
}

fn main() {
    let samples = std::env::var("STATE_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        println!("{samples} calls per operation, one at a time:");
        run("memory", MemoryStores::new(), samples).await;
        let Some(nodes) = services::server(services::CASSANDRA, "benches/state.rs") else {
            return;
        };
        let var = |name: &str| std::env::var(name).unwrap_or_default();
        let config = CassandraConfig::new(nodes.split(','))
            .keyspace(services::unique("state_bench"))
            .credentials(
                var("PROSODY_CASSANDRA_USER"),
                var("PROSODY_CASSANDRA_PASSWORD"),
            );
        let stores = CassandraStores::connect(&config, "bench").await.unwrap();
        run("cassandra", stores, samples).await;
    });
}
