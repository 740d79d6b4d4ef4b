//! The memory stores run the shared timer store conformance suite, one
//! test per check, under a paused clock and with several slab sizes; a
//! proptest checks that its slabs and key index stay consistent under any
//! interleaving (with shrinking); and it drops what it no longer needs.

use proptest::prelude::*;
use prosody_conformance::broker::Failure;
use prosody_conformance::store::timer as conformance;
use prosody_contracts::Timestamp;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::timer::{TimerEntry, TimerKind, TimerStore, round_to_second};
use prosody_memory::{MemoryDedupStore, MemoryDeferStore, MemoryStores, MemoryTimerStore};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

macro_rules! checks {
    ($($check:ident),* $(,)?) => {$(
        #[tokio::test(start_paused = true)]
        async fn $check() -> Result<(), Failure> {
            conformance::$check(&MemoryStores::new()).await
        }
    )*};
}

checks!(
    schedule_is_idempotent,
    times_round_to_the_second,
    schedule_replaces_the_trace,
    unschedule_removes_exactly_one_timer,
    clear_removes_every_timer_of_the_key,
    scheduled_is_ascending,
    load_returns_exactly_the_range,
    kinds_are_independent,
    interleaved_operations_keep_slabs_and_keys_consistent,
);

#[tokio::test(start_paused = true)]
async fn run_all_on_one_shared_store() -> Result<(), Failure> {
    conformance::run_all(&MemoryStores::new()).await
}

/// Slabs of a second (every timer its own slab), a minute and a day pass
/// too: the suite's times sit on their boundaries.
#[tokio::test(start_paused = true)]
async fn run_all_with_other_slab_sizes() -> Result<(), Failure> {
    for seconds in [1, 60, 86_400] {
        let timers = MemoryTimerStore::with_slab_size(Duration::from_secs(seconds));
        let store =
            MemoryStores::from_parts(timers, MemoryDeferStore::new(), MemoryDedupStore::new());
        conformance::run_all(&store)
            .await
            .map_err(|f| Failure::new(format!("slabs of {seconds} s: {f}")))?;
    }
    Ok(())
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_millis(seconds * 1000)
}

/// Empty slabs, keys and partitions are dropped as soon as their last timer
/// goes, by unschedule and by clear.
#[tokio::test(start_paused = true)]
async fn emptied_slabs_and_keys_are_dropped_at_once() {
    let store = MemoryTimerStore::with_slab_size(Duration::from_secs(60));
    let (p0, p1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    let (a, b) = (Key::from("a"), Key::from("b"));
    for t in [0, 30, 60, 120, 180] {
        store.schedule(&p0, TimerEntry::new(a.clone(), at(t)));
    }
    store.schedule(&p0, TimerEntry::new(b.clone(), at(30)));
    store.schedule(&p1, TimerEntry::new(a.clone(), at(0)));
    assert_eq!(
        (
            store.stored_timers(),
            store.stored_slabs(),
            store.indexed_keys()
        ),
        (7, 5, 3)
    );
    // 60 s was alone in its slab.
    store.unschedule(&p0, &a, TimerKind::Application, at(60));
    assert_eq!(
        (
            store.stored_timers(),
            store.stored_slabs(),
            store.indexed_keys()
        ),
        (6, 4, 3)
    );
    // b's only timer: its key goes, its slab stays for a's 0 s and 30 s.
    store.unschedule(&p0, &b, TimerKind::Application, at(30));
    assert_eq!(
        (
            store.stored_timers(),
            store.stored_slabs(),
            store.indexed_keys()
        ),
        (5, 4, 2)
    );
    store.clear(&p0, &a, TimerKind::Application);
    assert_eq!(
        (
            store.stored_timers(),
            store.stored_slabs(),
            store.indexed_keys()
        ),
        (1, 1, 1)
    );
    store.clear(&p1, &a, TimerKind::Application);
    assert_eq!(
        (
            store.stored_timers(),
            store.stored_slabs(),
            store.indexed_keys()
        ),
        (0, 0, 0)
    );
}

/// Clones share the timers.
#[tokio::test(start_paused = true)]
async fn clones_share_the_timers() {
    let store = MemoryTimerStore::new();
    let clone = store.clone();
    let p = TopicPartition::new("t", 0);
    store.schedule(&p, TimerEntry::new("k", at(5)));
    assert_eq!(
        clone
            .scheduled(&p, &Key::from("k"), TimerKind::Application)
            .await
            .unwrap(),
        vec![at(5)]
    );
    assert_eq!(clone.stored_timers(), 1);
}

/// An operation of the proptest: partition, key and time indices are
/// small, so operations often meet the same timers.
#[derive(Clone, Debug)]
enum Op {
    Schedule(i32, u8, i64, Option<u8>),
    Unschedule(i32, u8, i64),
    Clear(i32, u8),
}

fn key(k: u8) -> Key {
    Key::from(format!("k{k}"))
}

fn op() -> impl Strategy<Value = Op> {
    // Milliseconds across four minute-slabs each side of the epoch, so
    // slab numbers are negative too and sub-second parts round both ways.
    let time = -240_000i64..240_000;
    prop_oneof![
        5 => (0..2, 0u8..3, time.clone(), proptest::option::of(0u8..3))
            .prop_map(|(p, k, t, tr)| Op::Schedule(p, k, t, tr)),
        3 => (0..2, 0u8..3, time).prop_map(|(p, k, t)| Op::Unschedule(p, k, t)),
        1 => (0..2, 0u8..3).prop_map(|(p, k)| Op::Clear(p, k)),
    ]
}

type Model = BTreeMap<(i32, Timestamp, Key), Option<Arc<str>>>;

/// Applies `op` to the store and the model.
fn apply(store: &MemoryTimerStore, model: &mut Model, op: &Op) {
    let partition = |p: i32| TopicPartition::new("t", p);
    match *op {
        Op::Schedule(p, k, millis, trace) => {
            let time = Timestamp::from_millis(millis);
            let trace: Option<Arc<str>> = trace.map(|n| Arc::from(format!("trace-{n}")));
            let entry = TimerEntry {
                key: key(k),
                time,
                kind: TimerKind::Application,
                trace: trace.clone(),
            };
            store.schedule(&partition(p), entry);
            model.insert((p, round_to_second(time), key(k)), trace);
        }
        Op::Unschedule(p, k, millis) => {
            let time = Timestamp::from_millis(millis);
            store.unschedule(&partition(p), &key(k), TimerKind::Application, time);
            model.remove(&(p, round_to_second(time), key(k)));
        }
        Op::Clear(p, k) => {
            store.clear(&partition(p), &key(k), TimerKind::Application);
            model.retain(|(q, _, kk), _| !(*q == p && *kk == key(k)));
        }
    }
}

/// The store agrees with the model: each key's `scheduled`, each
/// partition's `load` over everything and over `range`, and its counts
/// (so no empty slab or key lingers).
async fn agrees(
    store: &MemoryTimerStore,
    model: &Model,
    range: (i64, i64),
) -> Result<(), TestCaseError> {
    for p in 0..2 {
        let partition = TopicPartition::new("t", p);
        for k in 0..3 {
            let expected: Vec<Timestamp> = model
                .keys()
                .filter(|(q, _, kk)| *q == p && *kk == key(k))
                .map(|(_, t, _)| *t)
                .collect();
            prop_assert_eq!(
                store
                    .scheduled(&partition, &key(k), TimerKind::Application)
                    .await?,
                expected
            );
        }
        let (from, until) = (
            Timestamp::from_millis(range.0),
            Timestamp::from_millis(range.1),
        );
        let window = round_to_second(from)..round_to_second(until);
        for (from, until, only) in [(at(-1000), at(1000), None), (from, until, Some(&window))] {
            let expected: Vec<TimerEntry> = model
                .iter()
                .filter(|((q, t, _), _)| *q == p && only.is_none_or(|w| w.contains(t)))
                .map(|((_, time, key), trace)| TimerEntry {
                    key: key.clone(),
                    time: *time,
                    kind: TimerKind::Application,
                    trace: trace.clone(),
                })
                .collect();
            prop_assert_eq!(store.load(&partition, from, until).await?, expected);
        }
    }
    let slab_size = store.slab_size();
    let slabs: std::collections::BTreeSet<(i32, i64)> = model
        .keys()
        .map(|(p, t, _)| (*p, slab_size.slab_of(*t)))
        .collect();
    let keys: std::collections::BTreeSet<(i32, &Key)> =
        model.keys().map(|(p, _, k)| (*p, k)).collect();
    prop_assert_eq!(store.stored_timers(), model.len());
    prop_assert_eq!(store.stored_slabs(), slabs.len());
    prop_assert_eq!(store.indexed_keys(), keys.len());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Under any interleaving of schedule, unschedule and clear, the
    /// slabs and the key index stay consistent with each other and with
    /// a model, checked after every step.
    #[test]
    fn slabs_and_key_index_stay_consistent(
        ops in proptest::collection::vec(op(), 1..60),
        range in (-240_000i64..240_000, -240_000i64..240_000),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let store = MemoryTimerStore::with_slab_size(Duration::from_secs(60));
            let mut model = Model::new();
            for op in &ops {
                apply(&store, &mut model, op);
                agrees(&store, &model, range).await?;
            }
            Ok::<(), TestCaseError>(())
        })?;
    }
}
