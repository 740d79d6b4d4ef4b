//! The memory stores run the shared `Stores` conformance suite, one test per
//! check, under a paused clock.

use prosody_conformance::broker::Failure;
use prosody_conformance::store::stores as conformance;
use prosody_memory::MemoryStores;

macro_rules! checks {
    ($($check:ident),* $(,)?) => {$(
        #[tokio::test(start_paused = true)]
        async fn $check() -> Result<(), Failure> {
            conformance::$check(&MemoryStores::new()).await
        }
    )*};
}

checks!(
    a_commit_lands_whole,
    timer_writes_apply_in_order,
    deferral_writes_apply_in_order,
    a_batch_written_twice_is_written_once,
    an_empty_batch_changes_nothing,
);

/// Two instances are two groups: they share nothing.
#[tokio::test(start_paused = true)]
async fn groups_are_isolated() -> Result<(), Failure> {
    conformance::groups_are_isolated(&MemoryStores::new(), &MemoryStores::new()).await
}

#[tokio::test(start_paused = true)]
async fn run_all_on_one_shared_store() -> Result<(), Failure> {
    conformance::run_all(&MemoryStores::new(), &MemoryStores::new()).await
}

/// Stores wrapped by a decorator that overrides nothing.
#[derive(Clone)]
struct Bare(MemoryStores);

impl prosody_contracts::store::Wrapped for Bare {
    type Inner = MemoryStores;

    fn inner(&self) -> &MemoryStores {
        &self.0
    }
}

/// A wrapper that overrides nothing keeps its inner stores' answers given
/// at once (the per-record fast path), through `AnyStores` too, and still
/// passes the whole suite.
#[tokio::test(start_paused = true)]
async fn a_wrapper_keeps_the_fast_paths_of_what_it_wraps() -> Result<(), Failure> {
    use prosody_contracts::Key;
    use prosody_contracts::broker::TopicPartition;
    use prosody_contracts::store::{
        AnyStores, Batch, DedupKey, DedupStore, DedupWrite, DeferStore, Stores,
    };
    use std::time::Duration;

    let stores = AnyStores::new(Bare(MemoryStores::new()));
    let partition = TopicPartition::new("t", 0);
    let key = DedupKey::new("1", "k", "id");
    let batch = Batch {
        dedup: vec![DedupWrite {
            key,
            ttl: Duration::from_secs(60),
        }],
        ..Batch::default()
    };
    let written = stores.commit_now(&partition, batch);
    assert!(matches!(written, Ok(Ok(()))), "commit_now declined");
    assert_eq!(stores.contains_now(key), Some(true));
    assert_eq!(stores.peek(&partition, &Key::from("k")), Some(false));
    assert!(stores.counts_now(&partition).is_some());
    conformance::run_all(
        &AnyStores::new(Bare(MemoryStores::new())),
        &AnyStores::new(Bare(MemoryStores::new())),
    )
    .await
}
