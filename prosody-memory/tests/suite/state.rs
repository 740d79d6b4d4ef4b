//! The memory stores run the shared keyed-state conformance suite, one
//! test per check, under a paused clock.

use prosody_conformance::broker::Failure;
use prosody_conformance::store::state as conformance;
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
    a_commit_reads_back,
    writes_apply_in_order,
    pages_follow_range_direction_and_limit,
    cells_expire_after_their_ttl,
    identify_keeps_the_first,
    random_batches_match_the_model,
);

/// Two instances are two groups: they share nothing.
#[tokio::test(start_paused = true)]
async fn groups_are_isolated() -> Result<(), Failure> {
    conformance::groups_are_isolated(&MemoryStores::new(), &MemoryStores::new()).await
}
