//! The schema: versioned migrations, applied once per keyspace under a
//! lock, and recorded in `schema_migrations`.
//!
//! Many clients may start at once: each creates the two bookkeeping tables
//! if they are missing (idempotent DDL), then takes the lock (a
//! lightweight transaction on `schema_lock`, held with a TTL so a client
//! that dies holding it cannot block the others for long), applies what
//! `schema_migrations` does not list yet, waiting for schema agreement
//! after each statement, and lets the lock go. A keyspace whose newest
//! version is newer than [`VERSION`] is refused: an older client would
//! misread what a newer one writes.

use crate::error::ConnectError;
use futures_util::TryStreamExt as _;
use scylla::client::session::Session;
use std::time::{Duration, SystemTime};
use tracing::{info, warn};

/// One schema change.
struct Migration {
    version: i32,
    description: &'static str,
    /// CQL with `{ks}` for the keyspace, each statement idempotent.
    statements: &'static [&'static str],
}

/// Every migration, oldest first; versions count up from one.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "timers (slabs, slab index, key index), deferred offsets, dedup records",
        statements: &[
            "CREATE TABLE IF NOT EXISTS {ks}.timer_slabs (
            group_id text, topic text, part int, slab bigint,
            at bigint, key text, kind tinyint, trace text,
            PRIMARY KEY ((group_id, topic, part, slab), at, key, kind))",
            "CREATE TABLE IF NOT EXISTS {ks}.timer_slab_index (
            group_id text, topic text, part int, slab bigint,
            PRIMARY KEY ((group_id, topic, part), slab))",
            "CREATE TABLE IF NOT EXISTS {ks}.timer_keys (
            group_id text, topic text, part int, key text, kind tinyint, at bigint,
            PRIMARY KEY ((group_id, topic, part, key), kind, at))",
            "CREATE TABLE IF NOT EXISTS {ks}.deferred (
            group_id text, topic text, part int, key text, record_offset bigint,
            failures int static,
            PRIMARY KEY ((group_id, topic, part, key), record_offset))",
            "CREATE TABLE IF NOT EXISTS {ks}.deferred_keys (
            group_id text, topic text, part int, key text,
            PRIMARY KEY ((group_id, topic, part), key))",
            "CREATE TABLE IF NOT EXISTS {ks}.dedup (
            group_id text, id blob,
            PRIMARY KEY ((group_id, id)))",
        ],
    },
    Migration {
        version: 2,
        description: "partition ownership epochs, which fence an old owner's writes",
        statements: &["CREATE TABLE IF NOT EXISTS {ks}.partition_owners (
            group_id text, topic text, part int, epoch bigint, owner text,
            PRIMARY KEY ((group_id, topic, part)))"],
    },
    Migration {
        version: 3,
        description: "keyed state: cells per (partition, collection, key), collection identities",
        statements: &[
            "CREATE TABLE IF NOT EXISTS {ks}.state_cells (
            group_id text, topic text, part int, coll text, key text, item blob, value blob,
            PRIMARY KEY ((group_id, topic, part, coll, key), item))",
            "CREATE TABLE IF NOT EXISTS {ks}.state_collections (
            group_id text, name text, identity text,
            PRIMARY KEY ((group_id, name)))",
        ],
    },
    Migration {
        version: 4,
        description: "keyed state: txns of commits larger than one batch, and their staged changes",
        statements: &[
            "CREATE TABLE IF NOT EXISTS {ks}.state_txns (
            group_id text, topic text, part int, txn bigint, staged_at bigint, committed boolean,
            rows int, keys set<text>,
            PRIMARY KEY ((group_id, topic, part), txn))",
            "CREATE TABLE IF NOT EXISTS {ks}.state_staged (
            group_id text, topic text, part int, txn bigint, seq int,
            coll text, key text, op tinyint, item blob, value blob, ttl int, ts bigint,
            PRIMARY KEY ((group_id, topic, part, txn), seq))",
        ],
    },
    Migration {
        version: 5,
        description: "keyed state in bounded partitions: state_items spreads a collection over \
                      buckets, state_buckets lists a deque's; state_cells (one partition per \
                      collection) is dropped",
        statements: &[
            "CREATE TABLE IF NOT EXISTS {ks}.state_items (
            group_id text, topic text, part int, coll text, key text, bucket bigint,
            item blob, value blob,
            PRIMARY KEY ((group_id, topic, part, coll, key, bucket), item))",
            "CREATE TABLE IF NOT EXISTS {ks}.state_buckets (
            group_id text, topic text, part int, coll text, key text, bucket bigint,
            PRIMARY KEY ((group_id, topic, part, coll, key), bucket))",
            "DROP TABLE IF EXISTS {ks}.state_cells",
        ],
    },
    Migration {
        version: 6,
        description: "the slab size of each group's timers, recorded by its first client, so a \
                      client with another slab_size is refused",
        statements: &["CREATE TABLE IF NOT EXISTS {ks}.timer_slab_sizes (
            group_id text, slab_seconds bigint, recorded_at timestamp,
            PRIMARY KEY (group_id))"],
    },
    Migration {
        version: 7,
        description: "the peer directory: one row per peer, shared by every group (not keyed \
                      by one), written with the peer's lease as its TTL",
        statements: &["CREATE TABLE IF NOT EXISTS {ks}.peers (
            peer_id blob, address text, network text, advertised text,
            PRIMARY KEY (peer_id))"],
    },
    Migration {
        version: 8,
        description: "publications: where each subsystem publishes a keyed-state collection \
                      (its owning group and topic), shared by every group, kept until replaced \
                      (no TTL)",
        statements: &["CREATE TABLE IF NOT EXISTS {ks}.publications (
            subsystem text, collection text, owner_group text, topic text, identity text,
            published boolean,
            PRIMARY KEY ((subsystem), collection))"],
    },
    Migration {
        version: 9,
        description: "per partition, how many keys and records are deferred: absolute values \
                      the partition's owner writes in each commit's batch",
        statements: &["CREATE TABLE IF NOT EXISTS {ks}.deferred_counts (
            group_id text, topic text, part int, keys bigint, records bigint,
            PRIMARY KEY ((group_id, topic, part)))"],
    },
];

/// The newest schema version this library knows.
pub const VERSION: i32 = 9;

/// How long the migration lock lives if its holder dies.
const LOCK_TTL: i32 = 60;

/// How long to wait for another client's migration.
const LOCK_WAIT: Duration = Duration::from_secs(120);

fn failed(what: &str, error: impl std::fmt::Display) -> ConnectError {
    ConnectError::Migration(format!("{what}: {error}"))
}

async fn run(session: &Session, cql: String) -> Result<(), ConnectError> {
    session
        .query_unpaged(cql.as_str(), &[])
        .await
        .map_err(|e| failed(&cql, e))?;
    session
        .await_schema_agreement()
        .await
        .map_err(|e| failed("awaiting schema agreement", e))?;
    Ok(())
}

async fn keyspace_exists(session: &Session, keyspace: &str) -> Result<bool, ConnectError> {
    let rows = session
        .query_unpaged(
            "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?",
            (keyspace,),
        )
        .await
        .map_err(|e| failed("reading the keyspaces", e))?
        .into_rows_result()
        .map_err(|e| failed("reading the keyspaces", e))?;
    Ok(rows.rows_num() > 0)
}

/// The versions `schema_migrations` lists.
async fn applied(session: &Session, keyspace: &str) -> Result<Vec<i32>, ConnectError> {
    let cql = format!("SELECT version FROM {keyspace}.schema_migrations");
    let pager = session
        .query_iter(cql.as_str(), &[])
        .await
        .map_err(|e| failed("reading schema_migrations", e))?;
    pager
        .rows_stream::<(i32,)>()
        .map_err(|e| failed("reading schema_migrations", e))?
        .map_ok(|(version,)| version)
        .try_collect()
        .await
        .map_err(|e| failed("reading schema_migrations", e))
}

/// Takes the migration lock within [`LOCK_WAIT`]; `false` if another
/// client holds it that long.
async fn lock(session: &Session, keyspace: &str, owner: &str) -> Result<bool, ConnectError> {
    let cql = format!(
        "INSERT INTO {keyspace}.schema_lock (name, owner) VALUES ('migrations', ?) \
         IF NOT EXISTS USING TTL {LOCK_TTL}"
    );
    let give_up = tokio::time::Instant::now() + LOCK_WAIT;
    loop {
        let rows = session
            .query_unpaged(cql.as_str(), (owner,))
            .await
            .map_err(|e| failed("taking the migration lock", e))?
            .into_rows_result()
            .map_err(|e| failed("taking the migration lock", e))?;
        // The first column of a conditional write's answer is `[applied]`.
        let applied = rows
            .rows::<(bool, Option<String>, Option<String>)>()
            .ok()
            .and_then(|mut rows| rows.next())
            .and_then(Result::ok)
            .map(|(applied, _, _)| applied)
            .or_else(|| {
                rows.rows::<(bool,)>()
                    .ok()
                    .and_then(|mut rows| rows.next())
                    .and_then(Result::ok)
                    .map(|(applied,)| applied)
            })
            .unwrap_or(false);
        if applied {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= give_up {
            return Ok(false);
        }
        // Another client migrates: wait for it.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn unlock(session: &Session, keyspace: &str, owner: &str) {
    let cql = format!("DELETE FROM {keyspace}.schema_lock WHERE name = 'migrations' IF owner = ?");
    if let Err(error) = session.query_unpaged(cql.as_str(), (owner,)).await {
        warn!(%error, "releasing the migration lock failed; it expires in {LOCK_TTL} s");
    }
}

/// Brings `keyspace` to [`VERSION`], creating it if it is missing.
///
/// # Errors
///
/// [`ConnectError::NewerSchema`] for a keyspace ahead of this library,
/// [`ConnectError::Migration`] for a statement that failed or a lock held
/// too long.
pub(crate) async fn migrate(session: &Session, keyspace: &str) -> Result<(), ConnectError> {
    if !keyspace_exists(session, keyspace).await? {
        warn!(
            keyspace,
            "creating the keyspace with SimpleStrategy and replication factor 1; \
             in production create it yourself with the replication your cluster needs"
        );
        run(
            session,
            format!(
                "CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = \
                 {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
            ),
        )
        .await?;
    }
    run(
        session,
        format!(
            "CREATE TABLE IF NOT EXISTS {keyspace}.schema_migrations (
                version int PRIMARY KEY, description text, applied_at timestamp)"
        ),
    )
    .await?;
    run(
        session,
        format!(
            "CREATE TABLE IF NOT EXISTS {keyspace}.schema_lock (name text PRIMARY KEY, owner text)"
        ),
    )
    .await?;
    let newest = |versions: &[i32]| versions.iter().copied().max().unwrap_or(0);
    let found = newest(&applied(session, keyspace).await?);
    if found > VERSION {
        return Err(ConnectError::NewerSchema {
            keyspace: keyspace.to_owned(),
            found,
            known: VERSION,
        });
    }
    if found == VERSION {
        return Ok(());
    }
    let owner = format!(
        "{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    if !lock(session, keyspace, &owner).await? {
        return Err(ConnectError::Migration(format!(
            "another client held the migration lock of {keyspace} for {LOCK_WAIT:?}"
        )));
    }
    let result = apply(session, keyspace).await;
    unlock(session, keyspace, &owner).await;
    result
}

/// Applies, in order, each migration `schema_migrations` does not list
/// (read again under the lock: another client may have applied some).
async fn apply(session: &Session, keyspace: &str) -> Result<(), ConnectError> {
    let done = applied(session, keyspace).await?;
    for migration in MIGRATIONS {
        if done.contains(&migration.version) {
            continue;
        }
        info!(
            keyspace,
            version = migration.version,
            description = migration.description,
            "applying a schema migration"
        );
        for statement in migration.statements {
            run(session, statement.replace("{ks}", keyspace)).await?;
        }
        let record = format!(
            "INSERT INTO {keyspace}.schema_migrations (version, description, applied_at) \
             VALUES (?, ?, toTimestamp(now()))"
        );
        session
            .query_unpaged(record.as_str(), (migration.version, migration.description))
            .await
            .map_err(|e| failed("recording the migration", e))?;
    }
    Ok(())
}
