//! `build()` on real Kafka and real Cassandra (from `scripts/services`)
//! refuses a `slab_size` other than the one the group's timers were stored
//! with, as [`ConfigError::Invalid`] naming `slab_size` and both sizes.
//! Without the servers it prints one line and does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody::{ConfigError, ProsodyClient};
use prosody_conformance::services;
use std::time::Duration;

const SUITE: &str = "tests/suite/cassandra_slab_size.rs (real Kafka and Cassandra)";

async fn build(keyspace: &str, group: &str, slab: Duration) -> Result<ProsodyClient, ConfigError> {
    ProsodyClient::builder()
        .group_id(group)
        .subscribed_topics([group])
        .cassandra_keyspace(keyspace)
        .slab_size(slab)
        .disable_probe()
        .build()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_refuses_a_slab_size_the_groups_timers_were_not_stored_with() {
    if services::server(services::KAFKA, SUITE).is_none()
        || services::server(services::CASSANDRA, SUITE).is_none()
    {
        return;
    }
    let keyspace = services::unique("slab_build");
    let group = services::unique("slab_group");
    let hour = Duration::from_secs(3600);
    build(&keyspace, &group, hour)
        .await
        .unwrap()
        .shutdown()
        .await;

    let Err(error) = build(&keyspace, &group, Duration::from_secs(600)).await else {
        panic!("a client with 10m slabs over the group's 1h timers is refused");
    };
    let shown = error.to_string();
    assert!(
        matches!(
            error,
            ConfigError::Invalid {
                option: "slab_size",
                ..
            }
        ),
        "{error:?}"
    );
    for part in ["stored with slab_size 1h", "slab_size is 10m", "back to 1h"] {
        assert!(shown.contains(part), "{part:?} missing from: {shown}");
    }

    build(&keyspace, &group, hour)
        .await
        .unwrap()
        .shutdown()
        .await;
}
