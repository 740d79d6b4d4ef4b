//! The dedup cache: bounded, keeping the latest ids, shared by the
//! services of one layer.

use super::{Calls, TestStore, config, handler, message, send};
use crate::dedup::DedupLayer;
use tower::Layer;

/// Ids come once each: the cache keeps the latest `cache_size` of them,
/// not the first ones it saw.
#[tokio::test(start_paused = true)]
async fn the_cache_keeps_the_most_recent_ids() {
    let calls = Calls::default();
    let layer = DedupLayer::new(config("1", 64));
    let mut service = layer.layer(handler(&calls, &TestStore::default()));
    for n in 0..200 {
        send(&mut service, message("k", Some(&format!("id-{n}")), false))
            .await
            .unwrap();
    }
    let before = calls.lock().unwrap().len();
    send(&mut service, message("k", Some("id-168"), false))
        .await
        .unwrap();
    assert_eq!(
        calls.lock().unwrap().len(),
        before,
        "an id 32 ids back was evicted from a cache of 64"
    );
}

#[tokio::test(start_paused = true)]
async fn the_cache_is_bounded_and_keeps_the_latest_key() {
    let calls = Calls::default();
    let layer = DedupLayer::new(config("1", 4));
    let mut service = layer.layer(handler(&calls, &TestStore::default()));
    let handled = |calls: &Calls| calls.lock().unwrap().len();
    for n in 0..100 {
        let id = format!("id-{n}");
        send(&mut service, message("k", Some(&id), false))
            .await
            .unwrap();
        assert!(layer.shared.cached_len() <= 4, "the cache outgrew its size");
        send(&mut service, message("k", Some(&id), false))
            .await
            .unwrap();
        assert_eq!(handled(&calls), n + 1, "the latest key was not cached");
    }
    // With no store behind it, an evicted key is handled again: never lost.
    send(&mut service, message("k", Some("id-0"), false))
        .await
        .unwrap();
    assert_eq!(handled(&calls), 101, "an evicted key was still cached");
}

#[tokio::test(start_paused = true)]
async fn services_of_one_layer_share_the_cache() {
    let calls = Calls::default();
    let layer = DedupLayer::new(config("1", 8));
    let mut first = layer.layer(handler(&calls, &TestStore::default()));
    let mut second = layer.clone().layer(handler(&calls, &TestStore::default()));
    send(&mut first, message("k", Some("a"), false))
        .await
        .unwrap();
    send(&mut second, message("k", Some("a"), false))
        .await
        .unwrap();
    assert_eq!(calls.lock().unwrap().len(), 1);
}
