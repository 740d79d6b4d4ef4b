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
use prosody_conformance::services;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::{
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

/// The recovery delay of the stores that resolve: short, so undecided
/// txns are decided within a test.
const DELAY: Duration = Duration::from_secs(2);

/// An owner of a new group that wrote the state before the commit.
async fn first_owner(
    keyspace: &str,
    group: &str,
    partition: &TopicPartition,
    delay: Duration,
) -> Option<CassandraStores> {
    let owner = stores(keyspace, group, delay).await?;
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

/// A read of `k` once its txns are decided: while one is not, the read
/// fails as retriable (never with half a commit), and is tried again.
async fn read_decided(
    stores: &CassandraStores,
    partition: &TopicPartition,
) -> ((Vec<String>, Option<Bytes>), bool) {
    let mut waited = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match stores.cell(partition, "", &Key::from("k"), b"").await {
            Ok(_) => return (read(stores, partition).await, waited),
            Err(error) => {
                assert!(error.is_retriable(), "{error}");
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "undecided for a minute: {error}"
                );
                waited = true;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// The owner crashes after each step of a large commit. The next owner's
/// `open` resolves it before anything reads: with its commit point every
/// change is there; without, reads of its key wait until its commit
/// point can no longer land (the recovery delay), then see none of it;
/// and nothing of the txn is left.
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
        // Its own sweep never runs within the test: the crash ends it.
        let Some(owner) =
            first_owner(&keyspace, &group, &partition, Duration::from_secs(3600)).await
        else {
            return;
        };
        let txn = owner
            .0
            .run_txn(&partition, &commit(), Writes::default(), last)
            .await
            .unwrap();
        drop(owner);
        let next = stores(&keyspace, &group, DELAY).await.unwrap();
        next.open(&partition).await.unwrap();
        let committed = last >= Step::CommitPoint;
        let (seen, waited) = read_decided(&next, &partition).await;
        assert_eq!(
            seen,
            if committed { after() } else { before() },
            "crashed after {last:?}"
        );
        assert_eq!(waited, !committed, "reads waited after {last:?}");
        assert_eq!(
            leftovers(&next, &partition, txn).await,
            (0, 0),
            "after {last:?}"
        );
    }
}

/// A large commit that failed midway, in a process that goes on: its next
/// read of the key resolves it first (waiting, without a commit point,
/// until it is decided).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_resolves_its_unfinished_commit_before_it_reads() {
    let keyspace = services::unique("staged");
    for (last, expected) in [(Step::Stage, before()), (Step::CommitPoint, after())] {
        let group = services::unique("unfinished");
        let partition = TopicPartition::new("t", 0);
        let Some(owner) = first_owner(&keyspace, &group, &partition, DELAY).await else {
            return;
        };
        let txn = owner
            .0
            .run_txn(&partition, &commit(), Writes::default(), last)
            .await
            .unwrap();
        let (seen, _) = read_decided(&owner, &partition).await;
        assert_eq!(seen, expected, "failed after {last:?}");
        assert_eq!(
            leftovers(&owner, &partition, txn).await,
            (0, 0),
            "after {last:?}"
        );
    }
}

/// A commit point that lands after its txn was forgotten (a batch the
/// batch log replayed late) stays deleted: the next owner promotes
/// nothing of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_commit_point_stays_forgotten() {
    let keyspace = services::unique("staged");
    let group = services::unique("late");
    let partition = TopicPartition::new("t", 2);
    let Some(owner) = first_owner(&keyspace, &group, &partition, DELAY).await else {
        return;
    };
    let txn = owner
        .0
        .run_txn(&partition, &commit(), Writes::default(), Step::Stage)
        .await
        .unwrap();
    // The commit point as it was sent: after the staging, before the
    // txn was forgotten.
    let commit_ts = owner.0.fence(&partition).await.unwrap().next();
    assert_eq!(read_decided(&owner, &partition).await.0, before());
    owner
        .0
        .commit_point(&partition, txn, Writes::default(), commit_ts)
        .await
        .unwrap();
    let next = stores(&keyspace, &group, DELAY).await.unwrap();
    next.open(&partition).await.unwrap();
    assert_eq!(read_decided(&next, &partition).await.0, before());
    assert_eq!(leftovers(&next, &partition, txn).await, (0, 0));
}

/// A whole large commit through `Stores::commit` lands whole and leaves
/// no txn behind; one that fits a batch writes no txn at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_commit_goes_through_a_txn() {
    let keyspace = services::unique("staged");
    let group = services::unique("whole");
    let partition = TopicPartition::new("t", 1);
    let Some(owner) = first_owner(&keyspace, &group, &partition, DELAY).await else {
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

/// A late promotion keeps a cell's TTL counted from when it was staged;
/// a put already past it becomes a delete; no TTL stays none.
#[test]
fn a_late_promotion_keeps_the_ttl_of_the_staging() {
    let mut write = put("c", "a", b"v".to_vec());
    write.ttl = Some(Duration::from_secs(30));
    let staged = Staged::of(&write, 7);
    let now = now_millis();
    assert_eq!(staged.change(now - 10_000, now).unwrap().1, 20);
    let (expired, ttl) = staged.change(now - 90_000, now).unwrap();
    assert_eq!(ttl, 1);
    assert!(
        matches!(expired.change, StateChange::Delete { .. }),
        "{expired:?}"
    );
    assert_eq!(staged.change(now, now).unwrap().1, 30);
    write.ttl = None;
    assert_eq!(
        Staged::of(&write, 7).change(now - 90_000, now).unwrap().1,
        0
    );
}
