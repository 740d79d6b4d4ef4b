//! The memory stores run the shared dedup store conformance suite, one
//! test per check, under a paused clock; and the memory dedup store keeps
//! its memory bounded by live entries.

use prosody_conformance::broker::Failure;
use prosody_conformance::store::dedup as conformance;
use prosody_contracts::store::dedup::{DedupKey, DedupStore};
use prosody_memory::{MemoryDedupStore, MemoryStores};
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
    insert_then_contains,
    absent_keys_are_absent,
    entries_expire_after_their_ttl,
    reinsert_refreshes_the_ttl,
    many_keys,
);

#[tokio::test(start_paused = true)]
async fn run_all_on_one_shared_store() -> Result<(), Failure> {
    conformance::run_all(&MemoryStores::new()).await
}

/// Expired entries that are never looked up again are still removed: after
/// a wave of expiries, new inserts sweep them, so the store ends up holding
/// only the live entries.
#[tokio::test(start_paused = true)]
async fn expired_entries_are_swept_by_later_inserts() {
    let store = MemoryDedupStore::new();
    let key = |i: usize| DedupKey::new("1", "key", &i.to_string());
    for i in 0..1000 {
        store.insert(key(i), Duration::from_secs(1));
    }
    assert_eq!(store.stored_entries(), 1000);
    tokio::time::advance(Duration::from_secs(2)).await;
    let mut peak = 0;
    for i in 1000..1100 {
        store.insert(key(i), Duration::from_secs(60));
        peak = peak.max(store.stored_entries());
    }
    assert!(peak <= 1000, "the store grew to {peak} entries");
    assert_eq!(
        store.stored_entries(),
        100,
        "expired entries were not swept"
    );
    assert!(store.contains(key(1050)).await.unwrap());
    assert!(!store.contains(key(5)).await.unwrap());
}

/// A full store forgets its oldest entry, never growing past its capacity.
#[tokio::test(start_paused = true)]
async fn a_full_store_forgets_its_oldest_entry() {
    let store = MemoryDedupStore::with_capacity(3);
    let keys: Vec<DedupKey> = (0..4)
        .map(|n| DedupKey::new("1", "k", &n.to_string()))
        .collect();
    for (n, key) in (1u64..).zip(&keys) {
        store.insert(*key, Duration::from_secs(60 * n));
    }
    assert_eq!(store.stored_entries(), 3);
    assert!(
        !store.contains(keys[0]).await.expect("contains"),
        "the oldest stayed"
    );
    for key in &keys[1..] {
        assert!(store.contains(*key).await.expect("contains"));
    }
}
