//! The memory stores run the shared peer directory conformance suite, one
//! test per check, under a paused clock (the expiry checks advance it);
//! and the memory directory keeps its memory bounded by running leases.

use prosody_conformance::broker::Failure;
use prosody_conformance::store::directory as conformance;
use prosody_contracts::peer::{PeerEntry, PeerId, Publication};
use prosody_contracts::store::PeerDirectory;
use prosody_memory::{MemoryPeerDirectory, MemoryStores};
use std::time::Duration;
use tokio::time::advance;

#[tokio::test(start_paused = true)]
async fn operations_follow_the_model() -> Result<(), Failure> {
    conformance::operations_follow_the_model(&MemoryStores::new()).await
}

#[tokio::test(start_paused = true)]
async fn publications_replace_and_stay_apart() -> Result<(), Failure> {
    conformance::publications_replace_and_stay_apart(&MemoryStores::new()).await
}

#[tokio::test(start_paused = true)]
async fn leases_run_out() -> Result<(), Failure> {
    conformance::leases_run_out(&MemoryStores::new(), advance).await
}

#[tokio::test(start_paused = true)]
async fn a_renewed_lease_outlasts_the_first() -> Result<(), Failure> {
    conformance::a_renewed_lease_outlasts_the_first(&MemoryStores::new(), advance).await
}

#[tokio::test(start_paused = true)]
async fn run_all_on_one_shared_store() -> Result<(), Failure> {
    conformance::run_all(&MemoryStores::new(), advance).await
}

/// Clones of the stores share one directory, as every group shares one.
#[tokio::test(start_paused = true)]
async fn clones_share_the_directory() {
    let stores = MemoryStores::new();
    let peer = PeerId::from_bytes([3; 16]);
    let entry = PeerEntry {
        address: "10.0.0.5:9099".into(),
        network: None,
        advertised: None,
    };
    stores
        .clone()
        .register(peer, &entry, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(stores.lookup(peer).await.unwrap(), Some(entry));
    assert_eq!(stores.peers().stored_leases(), 1);
}

/// Leases that run out and are never looked up again are still removed:
/// the next registration sweeps them, so the directory ends up holding
/// only the running leases.
#[tokio::test(start_paused = true)]
async fn leases_that_ran_out_are_swept_by_the_next_registration() {
    let directory = MemoryPeerDirectory::new();
    let entry = PeerEntry {
        address: "10.0.0.5:9099".into(),
        network: Some("east".into()),
        advertised: None,
    };
    let peer = |n: u16| {
        let mut bytes = [0; 16];
        bytes[..2].copy_from_slice(&n.to_be_bytes());
        PeerId::from_bytes(bytes)
    };
    for n in 0..1000 {
        directory
            .register(peer(n), &entry, Duration::from_secs(5))
            .await
            .unwrap();
    }
    directory
        .register(peer(1000), &entry, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(directory.stored_leases(), 1001);
    advance(Duration::from_secs(6)).await;
    directory
        .register(peer(1001), &entry, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(directory.stored_leases(), 2, "leases that ran out stayed");
    assert_eq!(directory.lookup(peer(5)).await.unwrap(), None);
    assert_eq!(directory.lookup(peer(1000)).await.unwrap(), Some(entry));
}

/// Publications are kept one per (subsystem, collection) pair: publishing
/// a pair again replaces its publication, so memory is bounded by the
/// pairs published; clones share them.
#[tokio::test(start_paused = true)]
async fn publications_are_kept_one_per_pair() {
    let stores = MemoryStores::new();
    let publication = |collection: &str, published: bool| Publication {
        subsystem: "billing".into(),
        collection: collection.into(),
        group: "ledger".into(),
        topic: "payments".into(),
        identity: "map/json".into(),
        published,
    };
    for n in 0..100 {
        let published = n % 2 == 0;
        stores
            .clone()
            .publish(&publication("accounts", published))
            .await
            .unwrap();
        stores
            .publish(&publication("invoices", !published))
            .await
            .unwrap();
    }
    assert_eq!(stores.peers().stored_publications(), 2);
    assert_eq!(
        stores.publication("billing", "accounts").await.unwrap(),
        Some(publication("accounts", false))
    );
    advance(Duration::from_secs(86_400 * 365)).await;
    assert_eq!(
        stores.publication("billing", "invoices").await.unwrap(),
        Some(publication("invoices", true)),
        "a publication has no lease"
    );
}
