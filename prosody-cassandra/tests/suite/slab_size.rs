//! The slab size is fixed per consumer group, on the real Cassandra of
//! `scripts/services` (password authentication on): a client with a slab
//! size other than the one its group's timers were stored with is refused
//! at connect, naming both sizes and `slab_size`, and the stored timers
//! stay found with the recorded size; another group keeps its own size;
//! of two clients starting at once with different sizes exactly one wins.
//! Without `PROSODY_CASSANDRA_NODES` the suite prints one line and does
//! not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody_cassandra::{CassandraConfig, CassandraStores, ConnectError};
use prosody_conformance::services;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::timer::{SlabSize, TimerKind, TimerStore, from_seconds};
use prosody_contracts::store::{Batch, Stores, TimerChange};
use scylla::client::session_builder::SessionBuilder;
use std::time::Duration;

const SUITE: &str = "prosody-cassandra/tests/suite/slab_size.rs (real Cassandra)";

/// Slab sizes A and B.
const HOUR: Duration = Duration::from_secs(3600);
const SEVEN_MINUTES: Duration = Duration::from_secs(420);

/// The timer's time, in seconds: far enough ahead that no prune touches it.
const AT: i64 = 2_000_000_000;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// The test Cassandra for `keyspace` with slab size `slab`, or `None`
/// without one.
fn config(keyspace: &str, slab: Duration) -> Option<CassandraConfig> {
    let nodes = services::server(services::CASSANDRA, SUITE)?;
    Some(
        CassandraConfig::new(nodes.split(','))
            .keyspace(keyspace)
            .credentials(
                var("PROSODY_CASSANDRA_USER"),
                var("PROSODY_CASSANDRA_PASSWORD"),
            )
            .slab_size(SlabSize::new(slab)),
    )
}

async fn connect(
    keyspace: &str,
    group: &str,
    slab: Duration,
) -> Result<CassandraStores, ConnectError> {
    let config = config(keyspace, slab).unwrap();
    CassandraStores::connect(&config, group).await
}

/// The timers of the partition within an hour of [`AT`], as `key@seconds`.
async fn found(stores: &CassandraStores, partition: &TopicPartition) -> Vec<String> {
    stores.open(partition).await.unwrap();
    let entries = stores
        .load(partition, from_seconds(AT - 3600), from_seconds(AT + 3600))
        .await
        .unwrap();
    stores.close(partition);
    entries
        .iter()
        .map(|entry| format!("{}@{}", entry.key, entry.time.as_millis() / 1000))
        .collect()
}

/// Asserts that `result` is the refusal of `configured` over `stored`,
/// naming both and the option; else shows what the client it opened
/// finds of the stored timer.
async fn assert_refused(
    result: Result<CassandraStores, ConnectError>,
    partition: &TopicPartition,
    stored: Duration,
    configured: Duration,
) -> ConnectError {
    let error = match result {
        Err(error) => error,
        Ok(opened) => {
            let seen = found(&opened, partition).await;
            panic!(
                "opened with slab size {configured:?} over timers stored with {stored:?}; \
                 its load found {seen:?}, expected [\"k@{AT}\"]"
            );
        }
    };
    assert!(
        matches!(
            &error,
            ConnectError::SlabSizeChanged { stored: s, configured: c, .. }
                if *s == stored && *c == configured
        ),
        "{error:?}"
    );
    assert!(!error.is_retriable());
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_slab_size_is_refused_and_the_timers_stay_found() {
    let keyspace = services::unique("slabs");
    if config(&keyspace, HOUR).is_none() {
        return;
    }
    let partition = TopicPartition::new("t", 0);
    let key = Key::from("k");

    // Slab size A: a timer, committed as an attempt commits it.
    let first = connect(&keyspace, "g", HOUR).await.unwrap();
    first.open(&partition).await.unwrap();
    let schedule = TimerChange::Schedule {
        time: from_seconds(AT),
        trace: None,
    };
    first
        .commit(
            &partition,
            Batch::default().timer(&key, TimerKind::Application, schedule),
        )
        .await
        .unwrap();
    first.close(&partition);
    drop(first);

    // Slab size B: refused, naming both sizes and what to do.
    let error = assert_refused(
        connect(&keyspace, "g", SEVEN_MINUTES).await,
        &partition,
        HOUR,
        SEVEN_MINUTES,
    )
    .await;
    let shown = error.to_string();
    for part in [
        "slab_size",
        "stored with slab_size 1h",
        "slab_size is 7m",
        "back to 1h",
    ] {
        assert!(shown.contains(part), "{part:?} missing from: {shown}");
    }

    // Slab size A again: the timer is found, and can be unscheduled.
    let again = connect(&keyspace, "g", HOUR).await.unwrap();
    assert_eq!(found(&again, &partition).await, [format!("k@{AT}")]);
    assert_eq!(
        again
            .scheduled(&partition, &key, TimerKind::Application)
            .await
            .unwrap(),
        [from_seconds(AT)]
    );

    // Per group: another group opens with B, and then keeps B.
    connect(&keyspace, "h", SEVEN_MINUTES).await.unwrap();
    assert_refused(
        connect(&keyspace, "h", HOUR).await,
        &partition,
        SEVEN_MINUTES,
        HOUR,
    )
    .await;
}

/// A group whose timers predate the record (schema version 5) gets the
/// size of its first client of this version, then keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_without_a_record_gets_the_size_of_its_first_client() {
    let keyspace = services::unique("slabs_old");
    if config(&keyspace, HOUR).is_none() {
        return;
    }
    let partition = TopicPartition::new("t", 0);
    let old = connect(&keyspace, "g", HOUR).await.unwrap();
    old.open(&partition).await.unwrap();
    let schedule = TimerChange::Schedule {
        time: from_seconds(AT),
        trace: None,
    };
    let batch = Batch::default().timer(&Key::from("k"), TimerKind::Application, schedule);
    old.commit(&partition, batch).await.unwrap();
    old.close(&partition);
    drop(old);
    // As before this version: the timers, and no recorded size.
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
        .query_unpaged(
            format!("DELETE FROM {keyspace}.timer_slab_sizes WHERE group_id = 'g'"),
            &[],
        )
        .await
        .unwrap();

    let upgraded = connect(&keyspace, "g", HOUR).await.unwrap();
    assert_eq!(found(&upgraded, &partition).await, [format!("k@{AT}")]);
    assert_refused(
        connect(&keyspace, "g", SEVEN_MINUTES).await,
        &partition,
        HOUR,
        SEVEN_MINUTES,
    )
    .await;
}

/// Two clients of a new group starting at once with different sizes:
/// exactly one is accepted, and the other is refused naming its size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_clients_starting_at_once_with_different_sizes_one_wins() {
    let keyspace = services::unique("slabs_race");
    if config(&keyspace, HOUR).is_none() {
        return;
    }
    // Migrated first, so the rounds race on the record alone.
    connect(&keyspace, "migrate", HOUR).await.unwrap();
    for round in 0..4 {
        let group = format!("race{round}");
        let (hour, seven) = tokio::join!(
            connect(&keyspace, &group, HOUR),
            connect(&keyspace, &group, SEVEN_MINUTES)
        );
        let refused = |result: &Result<CassandraStores, ConnectError>, configured| {
            matches!(
                result,
                Err(ConnectError::SlabSizeChanged { configured: c, .. }) if *c == configured
            )
        };
        let outcome = format!(
            "round {round}: {:?} / {:?}",
            hour.as_ref().err(),
            seven.as_ref().err()
        );
        assert!(
            (hour.is_ok() && refused(&seven, SEVEN_MINUTES))
                || (seven.is_ok() && refused(&hour, HOUR)),
            "{outcome}"
        );
    }
}
