//! The decorator's lifecycle over real (in-memory) stores.

use super::CachedStores;
use bytes::Bytes;
use prosody_core::broker::TopicPartition;
use prosody_core::key::Key;
use prosody_core::store::{Batch, StateChange, StateStore, StateWrite, Stores};
use prosody_memory::MemoryStores;
use std::sync::Arc;

fn put(value: &'static [u8]) -> Batch {
    let mut batch = Batch::default();
    batch.state.push(StateWrite {
        collection: Arc::from("c"),
        key: Key::from("k"),
        change: StateChange::Put {
            item: Bytes::from_static(b"a"),
            value: Bytes::from_static(value),
        },
        ttl: None,
    });
    batch
}

/// An open partition answers from what its commits wrote; a closed one,
/// or one opened again, reads the inner store.
#[tokio::test]
async fn an_open_partition_answers_from_its_commits() {
    let inner = MemoryStores::new();
    let cached = CachedStores::new(inner.clone(), None);
    let tp = TopicPartition::new("t", 0);
    let key = Key::from("k");
    let read = |stores: &CachedStores<MemoryStores>| {
        let (stores, tp, key) = (stores.clone(), tp.clone(), key.clone());
        async move { stores.cell(&tp, "c", &key, b"a").await.ok().flatten() }
    };
    cached.open(&tp).await.ok();
    assert_eq!(read(&cached).await, None, "absent, and now known so");
    assert!(
        cached.commit_now(&tp, put(b"1")).is_err(),
        "state goes to commit"
    );
    assert!(cached.commit(&tp, put(b"1")).await.is_ok());
    // Written behind the decorator's back: the cache still answers.
    assert!(inner.commit(&tp, put(b"2")).await.is_ok());
    assert_eq!(read(&cached).await, Some(Bytes::from_static(b"1")));
    cached.close(&tp);
    assert_eq!(
        read(&cached).await,
        Some(Bytes::from_static(b"2")),
        "closed"
    );
    cached.open(&tp).await.ok();
    assert_eq!(read(&cached).await, Some(Bytes::from_static(b"2")), "fresh");
    // Counted: the two reads of an open partition's store, and the one
    // its cache answered; a closed partition's read has no cache to ask.
    let lookups = cached.lookups();
    assert_eq!((lookups.hits(), lookups.misses()), (1, 2));
}
