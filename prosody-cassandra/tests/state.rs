//! The keyed-state store on the real Cassandra of `scripts/services`
//! (password authentication on): the shared conformance suite, and an old
//! owner's late state writes fenced by a new owner's. Without
//! `PROSODY_CASSANDRA_NODES` the suite prints one line and does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use bytes::Bytes;
use prosody_cassandra::{CassandraConfig, CassandraStores};
use prosody_core::broker::TopicPartition;
use prosody_core::broker::conformance::Failure;
use prosody_core::key::Key;
use prosody_core::services;
use prosody_core::store::conformance::state as conformance;
use prosody_core::store::{Batch, StateChange, StateStore, StateWrite, Stores};
use std::sync::{Arc, OnceLock};

const SUITE: &str = "prosody-cassandra/tests/state.rs (real Cassandra)";

fn keyspace() -> &'static str {
    static KEYSPACE: OnceLock<String> = OnceLock::new();
    KEYSPACE.get_or_init(|| services::unique("state"))
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

async fn stores(group: &str) -> Option<CassandraStores> {
    let nodes = services::server(services::CASSANDRA, SUITE)?;
    let config = CassandraConfig::new(nodes.split(','))
        .keyspace(keyspace())
        .credentials(
            var("PROSODY_CASSANDRA_USER"),
            var("PROSODY_CASSANDRA_PASSWORD"),
        );
    Some(CassandraStores::connect(&config, group).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_suite_passes_with_two_groups() -> Result<(), Failure> {
    let Some(mine) = stores("mine").await else {
        return Ok(());
    };
    let theirs = stores("theirs").await.unwrap();
    conformance::run_all(&mine, &theirs).await
}

fn put(item: &str, value: &str) -> StateWrite {
    StateWrite {
        collection: Arc::from("c"),
        key: Key::from("k"),
        change: StateChange::Put {
            item: Bytes::copy_from_slice(item.as_bytes()),
            value: Bytes::copy_from_slice(value.as_bytes()),
        },
        ttl: None,
    }
}

fn batch(state: Vec<StateWrite>) -> Batch {
    Batch {
        state,
        ..Batch::default()
    }
}

/// A commit of an owner that lost its partition without knowing (in
/// flight, or evicted) lands after the new owner's writes and neither
/// overwrites nor clears them. (What it writes where the new owner wrote
/// nothing does land: the README's known gap.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_owner_cannot_overwrite_a_new_owners_state() {
    let Some(old) = stores("owners").await else {
        return;
    };
    let new = stores("owners").await.unwrap();
    let p = TopicPartition::new(services::unique("owners"), 0);
    old.open(&p).await.unwrap();
    new.open(&p).await.unwrap();
    new.commit(&p, batch(vec![put("a", "new")])).await.unwrap();
    let mut clear = put("", "");
    clear.change = StateChange::Clear;
    old.commit(&p, batch(vec![put("a", "old"), clear]))
        .await
        .unwrap();
    let reader = stores("owners").await.unwrap();
    let got = reader.cell(&p, "c", &Key::from("k"), b"a").await.unwrap();
    assert_eq!(
        got.as_deref(),
        Some(&b"new"[..]),
        "the new owner's value after the old owner's late put and clear"
    );
}

/// A commit of large cells (800 keys' cells of 1 KiB, past Cassandra's
/// batch size limit, which binds a batch of several partitions) is
/// written in batches under the limit, not refused, and reads back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_of_large_cells_is_written() {
    let Some(stores) = stores("large").await else {
        return;
    };
    let p = TopicPartition::new(services::unique("large"), 0);
    stores.open(&p).await.unwrap();
    let value = "v".repeat(1024);
    let writes = (0..800)
        .map(|n| StateWrite {
            key: Key::from(format!("k{n}")),
            ..put("", &value)
        })
        .collect();
    stores.commit(&p, batch(writes)).await.unwrap();
    for n in 0..800 {
        let key = Key::from(format!("k{n}"));
        let cell = stores.cell(&p, "c", &key, b"").await.unwrap();
        assert_eq!(cell.map(|v| v.len()), Some(1024), "{key}'s cell");
    }
}
