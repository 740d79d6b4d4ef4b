//! The peer directory on the real Cassandra of `scripts/services`
//! (password authentication on): the shared conformance suite in real
//! time (leases of two seconds, watched run out by polling; publications),
//! the directory shared by the groups of one keyspace, and the categories
//! of request errors. Without
//! `PROSODY_CASSANDRA_NODES` the suite prints one line and does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody_cassandra::{CassandraConfig, CassandraStores};
use prosody_conformance::broker::Failure;
use prosody_conformance::services;
use prosody_conformance::store::directory as conformance;
use prosody_contracts::peer::{PeerEntry, PeerId, Publication};
use prosody_contracts::store::PeerDirectory;
use scylla::client::session_builder::SessionBuilder;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::time::sleep;

const SUITE: &str = "prosody-cassandra/tests/suite/directory.rs (real Cassandra)";

fn keyspace() -> &'static str {
    static KEYSPACE: OnceLock<String> = OnceLock::new();
    KEYSPACE.get_or_init(|| services::unique("directory"))
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// The configuration of the test Cassandra for `keyspace`, or `None`
/// without one.
fn config(keyspace: &str) -> Option<CassandraConfig> {
    let nodes = services::server(services::CASSANDRA, SUITE)?;
    Some(
        CassandraConfig::new(nodes.split(','))
            .keyspace(keyspace)
            .credentials(
                var("PROSODY_CASSANDRA_USER"),
                var("PROSODY_CASSANDRA_PASSWORD"),
            ),
    )
}

async fn stores(group: &str) -> Option<CassandraStores> {
    let config = config(keyspace())?;
    Some(CassandraStores::connect(&config, group).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_follow_the_model() -> Result<(), Failure> {
    let Some(stores) = stores("model").await else {
        return Ok(());
    };
    conformance::operations_follow_the_model(&stores).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publications_replace_and_stay_apart() -> Result<(), Failure> {
    let Some(stores) = stores("publications").await else {
        return Ok(());
    };
    conformance::publications_replace_and_stay_apart(&stores).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_run_out() -> Result<(), Failure> {
    let Some(stores) = stores("leases").await else {
        return Ok(());
    };
    conformance::leases_run_out(&stores, sleep).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_lease_outlasts_the_first() -> Result<(), Failure> {
    let Some(stores) = stores("renewed").await else {
        return Ok(());
    };
    conformance::a_renewed_lease_outlasts_the_first(&stores, sleep).await
}

/// The directory is not keyed by group: a peer registered through one
/// group's stores is found, and deregistered, through another's; a
/// publication written through one is read through another, and through
/// a view of the stores as another group (`for_group`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_group_shares_the_directory() {
    let Some(requester) = stores("requesters").await else {
        return;
    };
    let answerer = stores("answerers").await.unwrap();
    let peer = PeerId::random().unwrap();
    let entry = PeerEntry {
        address: "10.0.0.5:9099".into(),
        network: Some("east".into()),
        advertised: Some("peer.example:443".into()),
    };
    requester
        .register(peer, &entry, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(answerer.lookup(peer).await.unwrap(), Some(entry));
    answerer.deregister(peer).await.unwrap();
    assert_eq!(requester.lookup(peer).await.unwrap(), None);
    let publication = Publication {
        subsystem: format!("sub-{peer}"),
        collection: "accounts".into(),
        group: "requesters".into(),
        topic: "payments".into(),
        identity: "map/json".into(),
        published: true,
    };
    requester.publish(&publication).await.unwrap();
    let read = answerer
        .for_group("elsewhere")
        .publication(&publication.subsystem, "accounts")
        .await
        .unwrap();
    assert_eq!(read, Some(publication));
}

/// A request the server refuses (the table is gone) is not retriable; one
/// that times out is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_errors_keep_their_category() {
    let keyspace = services::unique("directory_errors");
    let Some(config) = config(&keyspace) else {
        return;
    };
    let stores = CassandraStores::connect(&config, "g").await.unwrap();
    let peer = PeerId::random().unwrap();
    let entry = PeerEntry {
        address: "10.0.0.5:9099".into(),
        network: None,
        advertised: None,
    };
    let session = SessionBuilder::new()
        .known_nodes(var(services::CASSANDRA).split(','))
        .user(
            var("PROSODY_CASSANDRA_USER"),
            var("PROSODY_CASSANDRA_PASSWORD"),
        )
        .build()
        .await
        .unwrap();
    session
        .query_unpaged(format!("DROP TABLE {keyspace}.peers"), &[])
        .await
        .unwrap();
    let ttl = Duration::from_secs(60);
    let refused = stores.register(peer, &entry, ttl).await.unwrap_err();
    assert!(!refused.is_retriable(), "{refused}");
    let refused = stores.lookup(peer).await.unwrap_err();
    assert!(!refused.is_retriable(), "{refused}");
    let refused = stores.deregister(peer).await.unwrap_err();
    assert!(!refused.is_retriable(), "{refused}");
    session
        .query_unpaged(format!("DROP TABLE {keyspace}.publications"), &[])
        .await
        .unwrap();
    let publication = Publication {
        subsystem: "billing".into(),
        collection: "accounts".into(),
        group: "ledger".into(),
        topic: "payments".into(),
        identity: "map/json".into(),
        published: true,
    };
    let refused = stores.publish(&publication).await.unwrap_err();
    assert!(!refused.is_retriable(), "{refused}");
    let refused = stores.publication("billing", "accounts").await.unwrap_err();
    assert!(!refused.is_retriable(), "{refused}");

    let impatient = config.request_timeout(Duration::from_nanos(1));
    // Connecting itself may already time out; either way it is retriable.
    match CassandraStores::connect(&impatient, "g").await {
        Err(error) => assert!(error.is_retriable(), "{error:?}"),
        Ok(stores) => {
            let error = stores.lookup(peer).await.unwrap_err();
            assert!(error.is_retriable(), "{error}");
        }
    }
}
