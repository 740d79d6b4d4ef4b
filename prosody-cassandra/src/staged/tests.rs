//! Large commits on the real Cassandra of `scripts/services`, crashed after
//! each step: the partition's next reader sees all of the commit or none.
//! Without `PROSODY_CASSANDRA_NODES` it prints one line and does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use super::{Staged, Step, now_millis};
use crate::write::Writes;
use crate::{CassandraConfig, CassandraStores};
use bytes::Bytes;
use prosody_core::broker::TopicPartition;
use prosody_core::key::Key;
use prosody_core::services;
use prosody_core::store::{
    Batch, Direction, ItemRange, StateChange, StateStore, StateWrite, Stores,
};
use std::sync::Arc;
use std::time::Duration;

const SUITE: &str = "prosody-cassandra staged txns (real Cassandra)";

async fn stores(keyspace: &str, group: &str, delay: Duration) -> Option<CassandraStores> {
    let nodes = services::server(services::CASSANDRA, SUITE)?;
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let config = CassandraConfig::new(nodes.split(','))
        .keyspace(keyspace)
        .credentials(
            var("PROSODY_CASSANDRA_USER"),
            var("PROSODY_CASSANDRA_PASSWORD"),
        )
        .recovery_delay(delay);
    Some(CassandraStores::connect(&config, group).await.unwrap())
}

fn write(collection: &str, change: StateChange) -> StateWrite {
    StateWrite {
        collection: Arc::from(collection),
        key: Key::from("k"),
        change,
        ttl: None,
    }
}

fn put(collection: &str, item: &str, value: Vec<u8>) -> StateWrite {
    write(
        collection,
        StateChange::Put {
            item: Bytes::copy_from_slice(item.as_bytes()),
            value: Bytes::from(value),
        },
    )
}

/// The key's items of `c`, and its marker, as a reader sees them.
async fn read(
    stores: &CassandraStores,
    partition: &TopicPartition,
) -> (Vec<String>, Option<Bytes>) {
    let cells = stores
        .cells(
            partition,
            "c",
            &Key::from("k"),
            &ItemRange::all(),
            Direction::Forward,
            1000,
        )
        .await
        .unwrap();
    let items = cells
        .into_iter()
        .map(|(item, _)| String::from_utf8(item.to_vec()).unwrap())
        .collect();
    let marker = stores
        .cell(partition, "", &Key::from("k"), b"")
        .await
        .unwrap();
    (items, marker)
}

/// What the partition keeps of a txn: its row, and its staged rows.
async fn leftovers(
    stores: &CassandraStores,
    partition: &TopicPartition,
    txn: i64,
) -> (usize, usize) {
    let inner = &stores.0;
    let ks = &inner.keyspace;
    let values = (
        inner.group.to_string(),
        partition.topic.to_string(),
        partition.partition,
        txn,
    );
    let count = |table: &str| {
        format!(
            "SELECT txn FROM {ks}.{table} WHERE group_id = ? AND topic = ? AND part = ? AND txn = ?"
        )
    };
    let mut found = Vec::new();
    for table in ["state_txns", "state_staged"] {
        let rows = inner
            .session
            .query_unpaged(count(table), values.clone())
            .await
            .unwrap()
            .into_rows_result()
            .unwrap();
        found.push(rows.rows_num());
    }
    (found[0], found[1])
}

/// Before: `a`, `b` and marker 1. The commit: a clear, 40 items of 1 KiB
/// (past one batch) and marker 2.
fn commit() -> Vec<StateWrite> {
    let mut state = vec![write("c", StateChange::Clear)];
    state.extend((0..40).map(|n| put("c", &format!("i{n:02}"), vec![b'x'; 1024])));
    state.push(put("", "", 2_i64.to_be_bytes().to_vec()));
    state
}

fn before() -> (Vec<String>, Option<Bytes>) {
    (
        vec!["a".into(), "b".into()],
        Some(Bytes::copy_from_slice(&1_i64.to_be_bytes())),
    )
}

fn after() -> (Vec<String>, Option<Bytes>) {
    let items = (0..40).map(|n| format!("i{n:02}")).collect();
    (items, Some(Bytes::copy_from_slice(&2_i64.to_be_bytes())))
}

/// An owner of a new group that wrote the state before the commit.
async fn first_owner(
    keyspace: &str,
    group: &str,
    partition: &TopicPartition,
) -> Option<CassandraStores> {
    // Its own sweep never runs within the test: the crash ends it.
    let owner = stores(keyspace, group, Duration::from_secs(3600)).await?;
    owner.open(partition).await.unwrap();
    let small = vec![
        put("c", "a", b"old".to_vec()),
        put("c", "b", b"old".to_vec()),
        put("", "", 1_i64.to_be_bytes().to_vec()),
    ];
    owner
        .commit(
            partition,
            Batch {
                state: small,
                ..Batch::default()
            },
        )
        .await
        .unwrap();
    Some(owner)
}

/// The owner crashes after each step of a large commit; the next owner's
/// `open` resolves the txn before anything reads: with its commit point,
/// every change is there, else none; and nothing of the txn is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_leaves_all_of_a_large_commit_or_none() {
    let keyspace = services::unique("staged");
    let steps = [
        Step::Begin,
        Step::Stage,
        Step::CommitPoint,
        Step::Promote,
        Step::Forget,
    ];
    for last in steps {
        let group = services::unique("crash");
        let partition = TopicPartition::new("t", 3);
        let Some(owner) = first_owner(&keyspace, &group, &partition).await else {
            return;
        };
        let txn = owner
            .0
            .run_txn(&partition, &commit(), Writes::default(), last)
            .await
            .unwrap();
        drop(owner);
        let next = stores(&keyspace, &group, Duration::from_secs(30))
            .await
            .unwrap();
        next.open(&partition).await.unwrap();
        let expected = if last >= Step::CommitPoint {
            after()
        } else {
            before()
        };
        assert_eq!(
            read(&next, &partition).await,
            expected,
            "crashed after {last:?}"
        );
        assert_eq!(
            leftovers(&next, &partition, txn).await,
            (0, 0),
            "after {last:?}"
        );
    }
}

/// A large commit that failed midway, in a process that goes on: its next
/// read of the partition resolves it first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_resolves_its_unfinished_commit_before_it_reads() {
    let keyspace = services::unique("staged");
    for (last, expected) in [(Step::Stage, before()), (Step::CommitPoint, after())] {
        let group = services::unique("unfinished");
        let partition = TopicPartition::new("t", 0);
        let Some(owner) = first_owner(&keyspace, &group, &partition).await else {
            return;
        };
        let txn = owner
            .0
            .run_txn(&partition, &commit(), Writes::default(), last)
            .await
            .unwrap();
        assert_eq!(
            read(&owner, &partition).await,
            expected,
            "failed after {last:?}"
        );
        assert_eq!(
            leftovers(&owner, &partition, txn).await,
            (0, 0),
            "after {last:?}"
        );
    }
}

/// A whole large commit through `Stores::commit` lands whole and leaves
/// no txn behind; one that fits a batch writes no txn at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_commit_goes_through_a_txn() {
    let keyspace = services::unique("staged");
    let group = services::unique("whole");
    let partition = TopicPartition::new("t", 1);
    let Some(owner) = first_owner(&keyspace, &group, &partition).await else {
        return;
    };
    owner
        .commit(
            &partition,
            Batch {
                state: commit(),
                ..Batch::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(read(&owner, &partition).await, after());
    let inner = &owner.0;
    let txns = inner
        .session
        .query_unpaged(
            format!(
                "SELECT txn FROM {}.state_txns WHERE group_id = ? AND topic = ? AND part = ?",
                inner.keyspace
            ),
            (inner.group.to_string(), "t", 1),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    assert_eq!(txns.rows_num(), 0);
}

/// A late promotion keeps a cell's TTL counted from when it was staged,
/// at least one second; no TTL stays none.
#[test]
fn a_late_promotion_keeps_the_ttl_of_the_staging() {
    let mut write = put("c", "a", b"v".to_vec());
    write.ttl = Some(Duration::from_secs(30));
    let staged = Staged::of(&write, 7);
    let now = now_millis();
    assert_eq!(staged.change(now - 10_000, now).unwrap().1, 20);
    assert_eq!(staged.change(now - 90_000, now).unwrap().1, 1);
    assert_eq!(staged.change(now, now).unwrap().1, 30);
    write.ttl = None;
    assert_eq!(
        Staged::of(&write, 7).change(now - 90_000, now).unwrap().1,
        0
    );
}
