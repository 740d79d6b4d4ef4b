//! The [`StateStore`] conformance suite: what the cells of a batch read
//! back as, whatever the backend.
//!
//! Writes go through [`Stores::commit`], the only way state is written.
//! Checks use topics no other check or run uses, so they can share one
//! store (and one Cassandra keyspace).

use super::{Checked, call, ensure_eq};
use crate::broker::Failure;
use bytes::Bytes;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::{
    Batch, Direction, ItemRange, StateChange, StateStore, StateWrite, Stores,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A name no other check, process or run uses.
fn unique(check: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    // Wall-clock nanoseconds only make runs distinct; no time is measured.
    let run = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("conformance-state-{check}-{}-{run}-{n}", std::process::id())
}

fn b(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

fn put(collection: &str, key: &str, item: &str, value: &str) -> StateWrite {
    write(
        collection,
        key,
        StateChange::Put {
            item: b(item),
            value: b(value),
        },
    )
}

fn write(collection: &str, key: &str, change: StateChange) -> StateWrite {
    StateWrite {
        collection: Arc::from(collection),
        key: Key::from(key),
        change,
        ttl: None,
    }
}

async fn commit(stores: &impl Stores, p: &TopicPartition, state: Vec<StateWrite>) -> Checked {
    let batch = Batch {
        state,
        ..Batch::default()
    };
    let what = format!("commit({p}, {batch:?})");
    call(&what, stores.commit(p, batch)).await
}

async fn cell(
    stores: &impl StateStore,
    p: &TopicPartition,
    collection: &str,
    key: &str,
    item: &str,
) -> Result<Option<Bytes>, Failure> {
    let what = format!("cell({p}, {collection}, {key}, {item})");
    call(
        &what,
        stores.cell(p, collection, &Key::from(key), item.as_bytes()),
    )
    .await
}

async fn cells(
    stores: &impl StateStore,
    p: &TopicPartition,
    collection: &str,
    key: &str,
    range: &ItemRange,
    direction: Direction,
    limit: usize,
) -> Result<Vec<(Bytes, Bytes)>, Failure> {
    let what = format!("cells({p}, {collection}, {key}, {range:?}, {direction:?}, {limit})");
    let key = Key::from(key);
    call(
        &what,
        stores.cells(p, collection, &key, range, direction, limit),
    )
    .await
}

/// Every item of one (collection, key), in order.
async fn every(
    stores: &impl StateStore,
    p: &TopicPartition,
    collection: &str,
    key: &str,
) -> Result<Vec<(Bytes, Bytes)>, Failure> {
    cells(
        stores,
        p,
        collection,
        key,
        &ItemRange::all(),
        Direction::Forward,
        100,
    )
    .await
}

/// Once a commit returns its cells read back, and only where they were
/// written: another partition, collection or key sees none of them.
pub async fn a_commit_reads_back(stores: &impl Stores) -> Checked {
    let p = TopicPartition::new(unique("reads"), 0);
    let other = TopicPartition::new(p.topic.to_string(), 1);
    commit(
        stores,
        &p,
        vec![
            put("c", "k", "", "v"),
            put("c", "k", "a", "1"),
            put("d", "k", "a", "2"),
        ],
    )
    .await?;
    ensure_eq(
        "the value",
        &Some(b("v")),
        &cell(stores, &p, "c", "k", "").await?,
    )?;
    ensure_eq(
        "an item",
        &Some(b("1")),
        &cell(stores, &p, "c", "k", "a").await?,
    )?;
    ensure_eq(
        "another collection's item",
        &Some(b("2")),
        &cell(stores, &p, "d", "k", "a").await?,
    )?;
    ensure_eq(
        "an absent item",
        &None,
        &cell(stores, &p, "c", "k", "b").await?,
    )?;
    ensure_eq(
        "another key",
        &None,
        &cell(stores, &p, "c", "j", "a").await?,
    )?;
    ensure_eq(
        "another partition",
        &None,
        &cell(stores, &other, "c", "k", "a").await?,
    )?;
    ensure_eq(
        "another partition's page",
        &Vec::new(),
        &cells(
            stores,
            &other,
            "c",
            "k",
            &ItemRange::all(),
            Direction::Forward,
            10,
        )
        .await?,
    )
}

/// Writes of one batch apply in order: a clear then a put keeps the put, a
/// put then a delete leaves nothing, and a batch written twice leaves what
/// it left once.
pub async fn writes_apply_in_order(stores: &impl Stores) -> Checked {
    let p = TopicPartition::new(unique("order"), 0);
    commit(
        stores,
        &p,
        vec![put("c", "k", "a", "1"), put("c", "k", "b", "1")],
    )
    .await?;
    let batch = vec![
        write("c", "k", StateChange::Clear),
        put("c", "k", "b", "2"),
        put("c", "k", "x", "3"),
        write("c", "k", StateChange::Delete { item: b("x") }),
    ];
    commit(stores, &p, batch.clone()).await?;
    commit(stores, &p, batch).await?;
    ensure_eq(
        "the items after clear, put, put, delete (twice)",
        &vec![(b("b"), b("2"))],
        &every(stores, &p, "c", "k").await?,
    )
}

/// A page holds the first `limit` items of its range in its direction,
/// with the range's lower end included and its upper end excluded.
pub async fn pages_follow_range_direction_and_limit(stores: &impl Stores) -> Checked {
    let p = TopicPartition::new(unique("pages"), 0);
    let items = ["", "a", "b", "ba", "c", "d"];
    commit(
        stores,
        &p,
        items.iter().map(|item| put("c", "k", item, item)).collect(),
    )
    .await?;
    let pairs = |names: &[&str]| -> Vec<(Bytes, Bytes)> {
        names.iter().map(|name| (b(name), b(name))).collect()
    };
    let range = ItemRange {
        from: b("a"),
        until: Some(b("c")),
    };
    ensure_eq(
        "forward in [a, c)",
        &pairs(&["a", "b", "ba"]),
        &cells(stores, &p, "c", "k", &range, Direction::Forward, 10).await?,
    )?;
    ensure_eq(
        "backward in [a, c), 2",
        &pairs(&["ba", "b"]),
        &cells(stores, &p, "c", "k", &range, Direction::Backward, 2).await?,
    )?;
    ensure_eq(
        "forward from the start, 2",
        &pairs(&["", "a"]),
        &cells(
            stores,
            &p,
            "c",
            "k",
            &ItemRange::all(),
            Direction::Forward,
            2,
        )
        .await?,
    )?;
    let open = ItemRange {
        from: b("b\0"),
        until: None,
    };
    ensure_eq(
        "forward after b",
        &pairs(&["ba", "c", "d"]),
        &cells(stores, &p, "c", "k", &open, Direction::Forward, 10).await?,
    )
}

/// A cell written with a TTL is read until it expires and never after.
pub async fn cells_expire_after_their_ttl(stores: &impl Stores) -> Checked {
    const TTL: Duration = Duration::from_secs(1);
    let p = TopicPartition::new(unique("ttl"), 0);
    let mut short = put("c", "k", "a", "1");
    short.ttl = Some(TTL);
    commit(stores, &p, vec![short, put("c", "k", "b", "2")]).await?;
    ensure_eq(
        "before the TTL",
        &Some(b("1")),
        &cell(stores, &p, "c", "k", "a").await?,
    )?;
    // Waits for the store to expire the cell, with a deadline: the
    // store's clock decides, not this one.
    let deadline = tokio::time::Instant::now() + TTL * 20;
    while cell(stores, &p, "c", "k", "a").await?.is_some() {
        if tokio::time::Instant::now() > deadline {
            return Err(Failure::new("a cell outlived its TTL by 19 s"));
        }
        tokio::time::sleep(TTL / 10).await;
    }
    ensure_eq(
        "the page after the TTL",
        &vec![(b("b"), b("2"))],
        &every(stores, &p, "c", "k").await?,
    )
}

/// The first identity recorded for a name stays.
pub async fn identify_keeps_the_first(stores: &impl Stores) -> Checked {
    let name = unique("identity");
    ensure_eq(
        "the first identify",
        &"map/json".to_owned(),
        &call("identify", stores.identify(&name, "map/json")).await?,
    )?;
    ensure_eq(
        "a later identify with another identity",
        &"map/json".to_owned(),
        &call("identify", stores.identify(&name, "value/json")).await?,
    )
}

/// Seeded random batches over few items (puts, deletes, clears of two
/// collections and two keys) read back as a model of ordered maps says,
/// point reads and pages in both directions.
pub async fn random_batches_match_the_model(stores: &impl Stores) -> Checked {
    let p = TopicPartition::new(unique("model"), 0);
    let mut model: BTreeMap<(&str, &str), BTreeMap<Bytes, Bytes>> = BTreeMap::new();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        usize::try_from(state % below).unwrap_or(0)
    };
    let (collections, keys, items) = (["c", "d"], ["k", "j"], ["", "a", "b", "c", "d", "e"]);
    for step in 0..40 {
        let mut batch = Vec::new();
        for _ in 0..=next(5) {
            let (c, k, item) = (collections[next(2)], keys[next(2)], items[next(6)]);
            let cells = model.entry((c, k)).or_default();
            let change = match next(10) {
                0 => {
                    cells.clear();
                    StateChange::Clear
                }
                1..=3 => {
                    cells.remove(item.as_bytes());
                    StateChange::Delete { item: b(item) }
                }
                _ => {
                    let value = format!("{step}");
                    cells.insert(b(item), b(&value));
                    StateChange::Put {
                        item: b(item),
                        value: b(&value),
                    }
                }
            };
            batch.push(write(c, k, change));
        }
        commit(stores, &p, batch).await?;
        for ((c, k), expected) in &model {
            let all: Vec<_> = expected
                .iter()
                .map(|(i, v)| (i.clone(), v.clone()))
                .collect();
            let got = every(stores, &p, c, k).await?;
            ensure_eq(&format!("step {step}: {c}/{k} forward"), &all, &got)?;
            let back: Vec<_> = all.iter().rev().take(2).cloned().collect();
            let got = cells(stores, &p, c, k, &ItemRange::all(), Direction::Backward, 2).await?;
            ensure_eq(&format!("step {step}: {c}/{k} last two"), &back, &got)?;
            let item = items[next(6)];
            let got = cell(stores, &p, c, k, item).await?;
            ensure_eq(
                &format!("step {step}: {c}/{k}/{item:?}"),
                &expected.get(item.as_bytes()).cloned(),
                &got,
            )?;
        }
    }
    Ok(())
}

/// Two instances for two consumer groups never see each other's cells.
pub async fn groups_are_isolated(mine: &impl Stores, theirs: &impl Stores) -> Checked {
    let p = TopicPartition::new(unique("groups"), 0);
    commit(mine, &p, vec![put("c", "k", "a", "1")]).await?;
    ensure_eq(
        "another group's cell",
        &None,
        &cell(theirs, &p, "c", "k", "a").await?,
    )?;
    commit(theirs, &p, vec![write("c", "k", StateChange::Clear)]).await?;
    ensure_eq(
        "a cell after another group's clear",
        &Some(b("1")),
        &cell(mine, &p, "c", "k", "a").await?,
    )?;
    let name = unique("groups");
    call("identify", mine.identify(&name, "value/json")).await?;
    ensure_eq(
        "another group's identity",
        &"deque/json".to_owned(),
        &call("identify", theirs.identify(&name, "deque/json")).await?,
    )
}

/// [`run_all`] with the collections the checks write (`c` and `d`)
/// identified as `identity` (`kind/payload`) first, in both groups: a
/// backend that lays a collection out by its kind runs the suite once
/// per kind, each pair of instances for groups of its own.
pub async fn run_all_as(stores: &impl Stores, theirs: &impl Stores, identity: &str) -> Checked {
    for name in ["c", "d"] {
        for recorded in [
            call("identify", stores.identify(name, identity)).await?,
            call("identify", theirs.identify(name, identity)).await?,
        ] {
            ensure_eq(
                &format!("the identity of {name}"),
                &identity.to_owned(),
                &recorded,
            )?;
        }
    }
    run_all(stores, theirs).await
}

/// Runs every check (and [`groups_are_isolated`] on `stores` and
/// `theirs`); the failure names each check that failed.
pub async fn run_all(stores: &impl Stores, theirs: &impl Stores) -> Checked {
    let mut failures = Vec::new();
    macro_rules! run {
        ($($check:ident),* $(,)?) => {$(
            if let Err(failure) = $check(stores).await {
                failures.push(format!("{}: {failure}", stringify!($check)));
            }
        )*};
    }
    run!(
        a_commit_reads_back,
        writes_apply_in_order,
        pages_follow_range_direction_and_limit,
        cells_expire_after_their_ttl,
        identify_keeps_the_first,
        random_batches_match_the_model,
    );
    if let Err(failure) = groups_are_isolated(stores, theirs).await {
        failures.push(format!("groups_are_isolated: {failure}"));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure::new(failures.join("; ")))
    }
}
