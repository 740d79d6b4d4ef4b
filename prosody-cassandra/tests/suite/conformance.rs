//! The Cassandra stores on the real Cassandra of `scripts/services`
//! (password authentication on): every store conformance suite, the
//! schema's migrations under concurrent clients, the login, and the
//! categories of request errors. Without `PROSODY_CASSANDRA_NODES` the
//! suite prints one line and does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use prosody_cassandra::{CassandraConfig, CassandraStores, ConnectError, schema};
use prosody_conformance::broker::Failure;
use prosody_conformance::services;
use prosody_conformance::store as conformance;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::clock::Timestamp;
use prosody_contracts::key::Key;
use prosody_contracts::store::timer::{SlabSize, TimerKind, TimerStore};
use prosody_contracts::store::{
    Batch, DeferStore, DeferWrite, Deferral, Deferred, StoreError, Stores, TimerChange,
};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

#[path = "support/owner.rs"]
mod owner;

use owner::Owner;

const SUITE: &str = "prosody-cassandra/tests/suite/conformance.rs (real Cassandra)";

/// The keyspace this run's suites share (migrated by whichever connects
/// first).
fn keyspace() -> &'static str {
    static KEYSPACE: OnceLock<String> = OnceLock::new();
    KEYSPACE.get_or_init(|| services::unique("conformance"))
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

/// A raw session, for what the stores do not do (dropping a table).
async fn session() -> Session {
    let nodes = var(services::CASSANDRA);
    SessionBuilder::new()
        .known_nodes(nodes.split(','))
        .user(
            var("PROSODY_CASSANDRA_USER"),
            var("PROSODY_CASSANDRA_PASSWORD"),
        )
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timer_suite_passes() -> Result<(), Failure> {
    let Some(stores) = stores("timers").await else {
        return Ok(());
    };
    conformance::timer::run_all(&stores).await?;
    // Slabs of a minute: the suite's times sit on their boundaries.
    let config = config(keyspace())
        .unwrap()
        .slab_size(SlabSize::new(Duration::from_secs(60)));
    let minute = CassandraStores::connect(&config, "timers-minute")
        .await
        .unwrap();
    conformance::timer::run_all(&minute).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_defer_suite_passes() -> Result<(), Failure> {
    let Some(stores) = stores("defer").await else {
        return Ok(());
    };
    conformance::defer::run_all(&stores).await
}

/// Commits one deferral write of `key`, as an attempt of the runtime
/// would: a defer of `offset` (`Some(deferral)`) or a completion of it.
async fn commit_deferral(
    stores: &impl Stores,
    partition: &TopicPartition,
    key: &Key,
    offset: i64,
    deferral: Option<Deferral>,
) -> Result<(), StoreError> {
    let key = key.clone();
    let write = match deferral {
        Some(deferral) => DeferWrite::Defer {
            key,
            offset,
            deferral,
        },
        None => DeferWrite::Complete { key, offset },
    };
    stores
        .commit(partition, Batch::default().deferral(write))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_defer_suite_passes_for_an_owner() -> Result<(), Failure> {
    let Some(stores) = stores("defer-owner").await else {
        return Ok(());
    };
    let owner = Owner {
        inner: stores,
        opened: Arc::default(),
    };
    conformance::defer::run_all(&owner).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dedup_suite_passes() -> Result<(), Failure> {
    let Some(stores) = stores("dedup").await else {
        return Ok(());
    };
    conformance::dedup::run_all(&stores).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stores_suite_passes_with_two_groups() -> Result<(), Failure> {
    let Some(mine) = stores("mine").await else {
        return Ok(());
    };
    let theirs = stores("theirs").await.unwrap();
    conformance::stores::run_all(&mine, &theirs).await
}

/// The owner answers `peek` without a read once it opened a partition,
/// follows its own writes, and forgets the partition when it closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_knows_its_deferred_keys() {
    let Some(stores) = stores("peek").await else {
        return;
    };
    let p = TopicPartition::new(services::unique("peek"), 0);
    let (waiting, idle) = (Key::from("waiting"), Key::from("idle"));
    // Deferred before this member owns the partition: found at open.
    commit_deferral(&stores, &p, &waiting, 3, Some(Deferral::AfterFailure))
        .await
        .unwrap();
    assert_eq!(stores.peek(&p, &idle), None, "not owned yet");
    stores.open(&p).await.unwrap();
    assert_eq!(stores.peek(&p, &waiting), Some(true));
    assert_eq!(stores.peek(&p, &idle), Some(false));
    commit_deferral(&stores, &p, &idle, 9, Some(Deferral::AfterFailure))
        .await
        .unwrap();
    assert_eq!(stores.peek(&p, &idle), Some(true));
    commit_deferral(&stores, &p, &idle, 9, None).await.unwrap();
    assert_eq!(stores.peek(&p, &idle), Some(false));
    assert_eq!(stores.deferred(&p, &idle).await.unwrap(), None);
    stores.close(&p);
    assert_eq!(stores.peek(&p, &waiting), None, "closed");
    // Closed, it writes nothing more to the partition: it could not take
    // an epoch above the next owner's.
    let late = commit_deferral(&stores, &p, &idle, 10, Some(Deferral::AfterFailure)).await;
    assert!(
        late.as_ref().is_err_and(|e| !e.is_retriable()),
        "a write after close: {late:?}"
    );
    // Another member's write while this one does not own the partition is
    // seen when it owns it again.
    let other = CassandraStores::connect(&config(keyspace()).unwrap(), "peek")
        .await
        .unwrap();
    commit_deferral(&other, &p, &idle, 11, Some(Deferral::AfterFailure))
        .await
        .unwrap();
    stores.open(&p).await.unwrap();
    assert_eq!(stores.peek(&p, &idle), Some(true));
}

/// The old and the new owner of a partition write at once: the old one,
/// still believing what it knew, completes a key's head and clears its
/// timers after the new one deferred a later record of the key and
/// scheduled a timer. The new owner's writes survive, and the next owner
/// finds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_owner_cannot_erase_a_new_owners_writes() {
    let Some(old) = stores("owners").await else {
        return;
    };
    let new = stores("owners").await.unwrap();
    let p = TopicPartition::new(services::unique("owners"), 0);
    let key = Key::from("k");
    let later = Timestamp::from_millis(1_893_456_000_000);
    old.open(&p).await.unwrap();
    commit_deferral(&old, &p, &key, 5, Some(Deferral::AfterFailure))
        .await
        .unwrap();
    // The partition moves; the old owner does not know yet.
    new.open(&p).await.unwrap();
    commit_deferral(&new, &p, &key, 12, Some(Deferral::Behind))
        .await
        .unwrap();
    let schedule = TimerChange::Schedule {
        time: later,
        trace: None,
    };
    let batch = Batch::default().timer(&key, TimerKind::Application, schedule);
    new.commit(&p, batch).await.unwrap();
    // The old owner's retry of 5 succeeds: it believes the queue is now
    // empty and deletes it; and it clears the key's timers.
    commit_deferral(&old, &p, &key, 5, None).await.unwrap();
    assert_eq!(
        old.peek(&p, &key),
        Some(false),
        "what the old owner believes"
    );
    let clear = Batch::default().timer(&key, TimerKind::Application, TimerChange::Clear);
    old.commit(&p, clear).await.unwrap();

    let next = stores("owners").await.unwrap();
    next.open(&p).await.unwrap();
    assert_eq!(
        DeferStore::deferred(&next, &p, &key).await.unwrap(),
        Some(Deferred {
            offsets: vec![12],
            failures: 0,
        }),
        "the new owner's deferral after the old owner's late completion"
    );
    assert_eq!(next.deferred_keys(&p).await.unwrap(), vec![key.clone()]);
    assert_eq!(next.peek(&p, &key), Some(true));
    assert_eq!(
        next.scheduled(&p, &key, TimerKind::Application)
            .await
            .unwrap(),
        vec![later],
        "the new owner's timer after the old owner's late clear"
    );
}

/// A commit far over Cassandra's batch size limit (hundreds of timers of a
/// key scheduled, then cleared, in one attempt) is written, not refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_commit_is_written() {
    let Some(stores) = stores("large").await else {
        return;
    };
    let p = TopicPartition::new(services::unique("large"), 0);
    let key = Key::from("k");
    let times: Vec<_> = (0..400)
        .map(|n| Timestamp::from_millis(1_893_456_000_000 + n * 1000))
        .collect();
    let trace = Some(Arc::from(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    ));
    let schedule = times.iter().fold(Batch::default(), |batch, &time| {
        let change = TimerChange::Schedule {
            time,
            trace: trace.clone(),
        };
        batch.timer(&key, TimerKind::Application, change)
    });
    stores.commit(&p, schedule).await.unwrap();
    assert_eq!(
        stores
            .scheduled(&p, &key, TimerKind::Application)
            .await
            .unwrap(),
        times
    );
    let clear = Batch::default().timer(&key, TimerKind::Application, TimerChange::Clear);
    stores.commit(&p, clear).await.unwrap();
    assert_eq!(
        stores
            .scheduled(&p, &key, TimerKind::Application)
            .await
            .unwrap(),
        []
    );
}

/// Many clients migrating a new keyspace at once: all connect, and the
/// migration is recorded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_migrate_a_new_keyspace_once() {
    let keyspace = services::unique("migrate");
    let Some(config) = config(&keyspace) else {
        return;
    };
    let clients = (0..4).map(|n| {
        let config = config.clone();
        tokio::spawn(async move { CassandraStores::connect(&config, &format!("g{n}")).await })
    });
    for client in futures_util::future::join_all(clients).await {
        client.unwrap().unwrap();
    }
    let rows = session()
        .await
        .query_unpaged(
            format!("SELECT version FROM {keyspace}.schema_migrations"),
            &[],
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    let mut versions: Vec<i32> = rows
        .rows::<(i32,)>()
        .unwrap()
        .map(|row| row.unwrap().0)
        .collect();
    versions.sort_unstable();
    assert_eq!(versions, (1..=schema::VERSION).collect::<Vec<_>>());
}

/// A keyspace migrated by a newer version is refused, naming both
/// versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused() {
    let keyspace = services::unique("newer");
    let Some(config) = config(&keyspace) else {
        return;
    };
    CassandraStores::connect(&config, "g").await.unwrap();
    session()
        .await
        .query_unpaged(
            format!("INSERT INTO {keyspace}.schema_migrations (version, description) VALUES (99, 'later')"),
            &[],
        )
        .await
        .unwrap();
    let error = CassandraStores::connect(&config, "g").await.unwrap_err();
    assert!(
        matches!(
            error,
            ConnectError::NewerSchema {
                found: 99,
                known: schema::VERSION,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(!error.is_retriable());
    assert!(error.to_string().contains("99"), "{error}");
}

/// A wrong password fails to connect, naming authentication, and shows
/// nowhere: not in the error, not in the configuration's `Debug`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_naming_authentication() {
    let Some(config) = config(keyspace()) else {
        return;
    };
    let wrong = "wrong-secret-4242";
    let config = config.credentials(var("PROSODY_CASSANDRA_USER"), wrong);
    let error = CassandraStores::connect(&config, "g").await.unwrap_err();
    assert!(
        matches!(error, ConnectError::Authentication { .. }),
        "{error:?}"
    );
    assert!(!error.is_retriable());
    let shown = format!("{error} {error:?} {config:?}");
    assert!(shown.contains("authentication"), "{shown}");
    assert!(!shown.contains(wrong), "the password shows: {shown}");
}

/// A request the server refuses (its table is gone) is not retriable; one
/// that times out is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_errors_keep_their_category() {
    let keyspace = services::unique("errors");
    let Some(config) = config(&keyspace) else {
        return;
    };
    let stores = CassandraStores::connect(&config, "g").await.unwrap();
    let p = TopicPartition::new("t", 0);
    let key = Key::from("k");
    session()
        .await
        .query_unpaged(format!("DROP TABLE {keyspace}.timer_keys"), &[])
        .await
        .unwrap();
    let refused = stores
        .scheduled(&p, &key, TimerKind::Application)
        .await
        .unwrap_err();
    assert!(!refused.is_retriable(), "{refused}");

    let impatient = config.request_timeout(Duration::from_nanos(1));
    let slow = CassandraStores::connect(&impatient, "g").await;
    // Connecting itself may already time out; either way it is retriable.
    match slow {
        Err(error) => assert!(error.is_retriable(), "{error:?}"),
        Ok(stores) => {
            let error = stores.deferred(&p, &key).await.unwrap_err();
            assert!(error.is_retriable(), "{error}");
        }
    }
}
