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
