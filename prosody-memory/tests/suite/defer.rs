//! The memory stores run the shared defer store conformance suite, one
//! test per check, under a paused clock; replay generated operation
//! sequences against the suite's model with shrinking; and keeps its memory
//! proportional to the keys with deferred offsets.

use proptest::prelude::*;
use prosody_conformance::broker::Failure;
use prosody_conformance::store::defer::{self as conformance, Call, KEYS, Op, PARTITIONS};
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::defer::{DeferStore, Deferral};
use prosody_memory::{MemoryDeferStore, MemoryStores};

macro_rules! checks {
    ($($check:ident),* $(,)?) => {$(
        #[tokio::test(start_paused = true)]
        async fn $check() -> Result<(), Failure> {
            conformance::$check(&MemoryStores::new()).await
        }
    )*};
}

checks!(
    offsets_are_ascending_and_unique,
    complete_removes_the_head_and_returns_the_next,
    complete_of_another_offset_changes_nothing,
    failure_count_follows_the_head,
    drained_keys_disappear,
    partitions_and_keys_are_independent,
    counts_follow_the_writes_and_survive_a_reopen,
    random_interleaving_matches_the_model,
);

#[tokio::test(start_paused = true)]
async fn run_all_on_one_shared_store() -> Result<(), Failure> {
    conformance::run_all(&MemoryStores::new()).await
}

/// Operations over the whole model universe and a handful of offsets, so
/// duplicates, out-of-order defers and drained keys are common.
fn op() -> impl Strategy<Value = Op> {
    let call = prop_oneof![
        3 => (0..6_i64, prop_oneof![Just(Deferral::AfterFailure), Just(Deferral::Behind)])
            .prop_map(|(offset, deferral)| Call::Defer(offset, deferral)),
        2 => Just(Call::CompleteHead),
        1 => (0..6_i64).prop_map(Call::Complete),
        2 => Just(Call::Failed),
    ];
    (0..PARTITIONS, 0..KEYS, call).prop_map(|(partition, key, call)| Op {
        partition,
        key,
        call,
    })
}

proptest! {
    /// Any sequence of store calls gives the model's results and leaves
    /// the model's state after every step; a failing sequence shrinks to a
    /// minimal one.
    #[test]
    fn any_sequence_matches_the_model(ops in prop::collection::vec(op(), 0..60)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime");
        let result = runtime.block_on(conformance::replay(&MemoryStores::new(), &ops));
        if let Err(failure) = result {
            return Err(TestCaseError::fail(failure.message().to_owned()));
        }
    }
}

/// Draining every key leaves the store holding nothing, however many keys
/// and partitions were used.
#[tokio::test(start_paused = true)]
async fn drained_keys_leave_nothing_behind() {
    let store = MemoryDeferStore::new();
    let places: Vec<(TopicPartition, Key)> = (0..50)
        .flat_map(|p| {
            (0..20).map(move |k| (TopicPartition::new("t", p), Key::from(format!("k{k}"))))
        })
        .collect();
    for (tp, key) in &places {
        for offset in 0..3 {
            store.defer(tp, key, offset, Deferral::AfterFailure);
        }
        store.failed(tp, key);
    }
    assert_eq!(store.stored_keys(), 1000);
    for (tp, key) in &places {
        for offset in 0..3 {
            store.complete(tp, key, offset);
        }
    }
    assert_eq!(store.stored_keys(), 0, "drained keys stayed");
    for (tp, key) in &places {
        store.failed(tp, key);
        assert_eq!(store.peek(tp, key), Some(false));
    }
    assert_eq!(
        store.stored_keys(),
        0,
        "failed of drained keys created entries"
    );
}
