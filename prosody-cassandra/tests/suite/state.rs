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
use prosody_conformance::broker::Failure;
use prosody_conformance::services;
use prosody_conformance::store::state as conformance;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::{Batch, StateChange, StateStore, StateWrite, Stores};
use std::sync::{Arc, OnceLock};

const SUITE: &str = "prosody-cassandra/tests/suite/state.rs (real Cassandra)";

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

/// Maps and deques spread over buckets (`state_items`): the suite holds
/// for each layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_suite_passes_for_bucketed_maps_and_deques() -> Result<(), Failure> {
    for kind in ["map", "deque"] {
        let Some(mine) = stores(&format!("mine-{kind}")).await else {
            return Ok(());
        };
        let theirs = stores(&format!("theirs-{kind}")).await.unwrap();
        let identity = format!("{kind}/json");
        conformance::run_all_as(&mine, &theirs, &identity)
            .await
            .map_err(|failure| Failure::new(format!("{identity}: {failure}")))?;
    }
    Ok(())
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
    // A deque the new owner cleared while its index listed nothing: the old
    // owner's late first push (its bounds and a slot) stays hidden.
    assert_eq!(new.identify("q", "deque/json").await.unwrap(), "deque/json");
    let deque = |change| StateWrite {
        collection: Arc::from("q"),
        change,
        ..put("", "")
    };
    let bounds = StateChange::Put {
        item: Bytes::new(),
        value: Bytes::from_static(b"0,1"),
    };
    let first = StateChange::Put {
        item: Bytes::copy_from_slice(&(1_u64 << 63).to_be_bytes()),
        value: Bytes::from_static(b"old"),
    };
    new.commit(&p, batch(vec![deque(StateChange::Clear)]))
        .await
        .unwrap();
    old.commit(&p, batch(vec![deque(bounds), deque(first)]))
        .await
        .unwrap();
    let got = reader.cell(&p, "q", &Key::from("k"), b"").await.unwrap();
    assert_eq!(
        got, None,
        "the deque's bounds after the old owner's late push"
    );
    let range = prosody_contracts::store::ItemRange::all();
    let forward = prosody_contracts::store::Direction::Forward;
    let cells = reader
        .cells(&p, "q", &Key::from("k"), &range, forward, 10)
        .await;
    assert_eq!(cells.unwrap(), [], "the deque's items after it");
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

/// A deque of 2,500 slots spans three buckets of 1,024 positions and a map
/// of 600 entries all sixteen hashed buckets: pages across them come back
/// in order, in both directions, and a clear empties every bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_deques_and_maps_page_across_their_buckets() {
    use prosody_contracts::store::{Direction, ItemRange};
    let Some(stores) = stores("buckets").await else {
        return;
    };
    assert_eq!(
        stores.identify("q", "deque/json").await.unwrap(),
        "deque/json"
    );
    assert_eq!(stores.identify("m", "map/json").await.unwrap(), "map/json");
    let p = TopicPartition::new(services::unique("buckets"), 0);
    stores.open(&p).await.unwrap();
    let slot = |at: u64| Bytes::copy_from_slice(&(at ^ (1 << 63)).to_be_bytes());
    let entry = |n: u64| Bytes::from(format!("entry-{n:04}"));
    let write = |collection: &str, item: Bytes| StateWrite {
        collection: Arc::from(collection),
        key: Key::from("k"),
        change: StateChange::Put {
            value: item.clone(),
            item,
        },
        ttl: None,
    };
    for chunk in (0..2500).collect::<Vec<u64>>().chunks(500) {
        let mut writes: Vec<_> = chunk.iter().map(|&at| write("q", slot(at))).collect();
        writes.extend(
            chunk
                .iter()
                .filter(|&&n| n < 600)
                .map(|&n| write("m", entry(n))),
        );
        stores.commit(&p, batch(writes)).await.unwrap();
    }
    let key = Key::from("k");
    let page = |collection: &'static str, range: ItemRange, direction, limit| {
        let (stores, p, key) = (&stores, &p, &key);
        async move {
            let cells = stores
                .cells(p, collection, key, &range, direction, limit)
                .await
                .unwrap();
            cells.into_iter().map(|(item, _)| item).collect::<Vec<_>>()
        }
    };
    let across = ItemRange {
        from: slot(1000),
        until: Some(slot(2100)),
    };
    let forward = page("q", across.clone(), Direction::Forward, 1100).await;
    assert_eq!(forward, (1000..2100).map(slot).collect::<Vec<_>>());
    let backward = page("q", across, Direction::Backward, 100).await;
    assert_eq!(backward, (2000..2100).rev().map(slot).collect::<Vec<_>>());
    let everything = page("q", ItemRange::all(), Direction::Forward, 3000).await;
    assert_eq!(everything.len(), 2500, "every slot of the deque");
    let from = ItemRange {
        from: entry(100),
        until: None,
    };
    let entries = page("m", from.clone(), Direction::Forward, 64).await;
    assert_eq!(entries, (100..164).map(entry).collect::<Vec<_>>());
    let last = page("m", from, Direction::Backward, 3).await;
    assert_eq!(last, [entry(599), entry(598), entry(597)]);
    let got = stores.cell(&p, "m", &key, &entry(321)).await.unwrap();
    assert_eq!(got, Some(entry(321)), "a point read of a map entry");
    let clear = |collection: &str| StateWrite {
        change: StateChange::Clear,
        ..write(collection, Bytes::new())
    };
    // A put before the clear in the same commit goes too (even once its
    // bucket is written again); one after stays.
    let commit = vec![
        write("q", slot(9000)),
        clear("q"),
        clear("m"),
        write("q", slot(5)),
    ];
    stores.commit(&p, batch(commit)).await.unwrap();
    let again = vec![write("q", slot(9001))];
    stores.commit(&p, batch(again)).await.unwrap();
    let left = page("q", ItemRange::all(), Direction::Forward, 10).await;
    assert_eq!(left, [slot(5), slot(9001)], "the deque after its clear");
    let left = page("m", ItemRange::all(), Direction::Forward, 10).await;
    assert_eq!(left, Vec::<Bytes>::new(), "the map after its clear");
}

/// `for_group` reads another group's keyed state (a collection it
/// publishes) over the same connection, and leaves the stores it came from
/// reading their own group's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_group_reads_another_groups_state() {
    let Some(owner) = stores("publisher").await else {
        return;
    };
    let p = TopicPartition::new(services::unique("published"), 0);
    owner.open(&p).await.unwrap();
    owner
        .commit(&p, batch(vec![put("a", "published")]))
        .await
        .unwrap();
    let reader = stores("reader").await.unwrap();
    let key = Key::from("k");
    assert_eq!(reader.cell(&p, "c", &key, b"a").await.unwrap(), None);
    let theirs = reader.for_group("publisher");
    assert!(format!("{theirs:?}").contains("publisher"), "{theirs:?}");
    assert_eq!(
        theirs.cell(&p, "c", &key, b"a").await.unwrap().as_deref(),
        Some(&b"published"[..])
    );
    assert_eq!(
        reader.cell(&p, "c", &key, b"a").await.unwrap(),
        None,
        "the stores for_group came from read their own group's state still"
    );
}
