//! The slab size of each group's timers, recorded with them in
//! `timer_slab_sizes` (schema version 6).
//!
//! A timer lives in the slab its time falls in, counted in slabs of the
//! slab size; a client with another size looks for the stored timers in
//! slabs that do not hold them, so they would never fire and could not be
//! unscheduled. So at connect each client reads its group's recorded size
//! and refuses to start when its own differs
//! ([`ConnectError::SlabSizeChanged`]). The first client of a group
//! records its size with a lightweight transaction (`IF NOT EXISTS`), so of
//! two clients that start at once with different sizes exactly one wins and
//! the other is refused. The record has no TTL: it lives as long as the
//! group's timers may.
//!
//! A group whose timers predate the record (written by a version with
//! schema version 5 or older) gets the size of the first client of this
//! version that connects. The old version could only use the size it was
//! configured with, so this is right as long as that first client keeps
//! the old `slab_size`; a size changed in the same deploy goes unnoticed.

use crate::error::{Classify as _, ConnectError};
use prosody_contracts::store::timer::SlabSize;
use scylla::client::session::Session;
use scylla::errors::ExecutionError;
use scylla::statement::unprepared::Statement;
use scylla::statement::{Consistency, SerialConsistency};
use std::time::Duration;
use tracing::info;

/// A failed request: refused (a missing table or permission) or not
/// answered.
fn failed(group: &str, error: &ExecutionError) -> ConnectError {
    let what = format!("the timer slab size of group `{group}`: {error}");
    if error.refused() {
        ConnectError::Migration(what)
    } else {
        ConnectError::Unreachable(what)
    }
}

/// The group's recorded slab size in seconds, read at `SERIAL` (after any
/// recording in progress); `None` when none is recorded.
async fn recorded(
    session: &Session,
    keyspace: &str,
    group: &str,
) -> Result<Option<i64>, ConnectError> {
    let mut read = Statement::new(format!(
        "SELECT slab_seconds FROM {keyspace}.timer_slab_sizes WHERE group_id = ?"
    ));
    read.set_consistency(Consistency::Serial);
    let rows = session
        .query_unpaged(read, (group,))
        .await
        .map_err(|e| failed(group, &e))?
        .into_rows_result()
        .map_err(|e| ConnectError::Migration(format!("reading timer_slab_sizes: {e}")))?;
    let row = rows
        .maybe_first_row::<(Option<i64>,)>()
        .map_err(|e| ConnectError::Migration(format!("reading timer_slab_sizes: {e}")))?;
    // A row without a size (written by hand) counts as zero: a mismatch.
    Ok(row.map(|(seconds,)| seconds.unwrap_or(0)))
}

/// Records `seconds` for the group unless a size is recorded (a
/// lightweight transaction: the first writer wins).
async fn record(
    session: &Session,
    keyspace: &str,
    group: &str,
    seconds: i64,
) -> Result<(), ConnectError> {
    let mut insert = Statement::new(format!(
        "INSERT INTO {keyspace}.timer_slab_sizes (group_id, slab_seconds, recorded_at) \
         VALUES (?, ?, toTimestamp(now())) IF NOT EXISTS"
    ));
    // Global: clients in two datacenters must not both win.
    insert.set_serial_consistency(Some(SerialConsistency::Serial));
    session
        .query_unpaged(insert, (group, seconds))
        .await
        .map_err(|e| failed(group, &e))?;
    Ok(())
}

/// Records `seconds` for a group that had no size when last read, and
/// returns the size recorded now: `seconds`, or the size of another client
/// that recorded first (which this one must not overwrite).
async fn claim(
    session: &Session,
    keyspace: &str,
    group: &str,
    seconds: i64,
) -> Result<i64, ConnectError> {
    record(session, keyspace, group, seconds).await?;
    let stored = recorded(session, keyspace, group).await?.ok_or_else(|| {
        ConnectError::Unreachable(format!(
            "the timer slab size recorded for group `{group}` is not visible yet"
        ))
    })?;
    if stored == seconds {
        info!(
            keyspace,
            group,
            slab_size = %humantime::format_duration(Duration::from_secs(seconds.unsigned_abs())),
            "the group's timer slab size is recorded; timers the group stored before this \
             version must have used it"
        );
    }
    Ok(stored)
}

/// Checks `configured` against the slab size recorded for `group`,
/// recording it first if the group has none.
///
/// # Errors
///
/// [`ConnectError::SlabSizeChanged`] when the recorded size differs;
/// [`ConnectError::Unreachable`] or [`ConnectError::Migration`] when the
/// record cannot be read or written.
pub(crate) async fn check(
    session: &Session,
    keyspace: &str,
    group: &str,
    configured: SlabSize,
) -> Result<(), ConnectError> {
    let configured = configured.as_duration();
    let seconds = i64::try_from(configured.as_secs()).unwrap_or(i64::MAX);
    let stored = match recorded(session, keyspace, group).await? {
        Some(stored) => stored,
        None => claim(session, keyspace, group, seconds).await?,
    };
    if stored == seconds {
        return Ok(());
    }
    Err(ConnectError::SlabSizeChanged {
        group: group.to_owned(),
        keyspace: keyspace.to_owned(),
        stored: Duration::from_secs(stored.max(0).unsigned_abs()),
        configured,
    })
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::expect_used,
        clippy::unwrap_used,
        clippy::panic,
        reason = "test code fails loudly"
    )]

    use super::{check, claim};
    use crate::error::ConnectError;
    use crate::{CassandraConfig, CassandraStores};
    use prosody_conformance::services;
    use prosody_contracts::store::timer::SlabSize;
    use std::time::Duration;

    const SUITE: &str = "prosody-cassandra slab size record (real Cassandra)";

    /// The race of two clients starting at once, B's steps pinned: B read
    /// no record, then A connected and recorded its size, then B records.
    /// B must find A's size (and be refused), not overwrite it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_that_read_no_record_does_not_overwrite_one_recorded_since() {
        let Some(nodes) = services::server(services::CASSANDRA, SUITE) else {
            return;
        };
        let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
        let keyspace = services::unique("slab_claim");
        let config = CassandraConfig::new(nodes.split(','))
            .keyspace(keyspace.as_str())
            .credentials(
                var("PROSODY_CASSANDRA_USER"),
                var("PROSODY_CASSANDRA_PASSWORD"),
            )
            .slab_size(SlabSize::new(Duration::from_secs(3600)));
        // A, first: records an hour.
        let a = CassandraStores::connect(&config, "g").await.unwrap();
        let session = &a.0.session;
        // B, having read no record before A's, records seven minutes.
        let won = claim(session, &keyspace, "g", 420).await.unwrap();
        assert_eq!(won, 3600, "B overwrote the size A recorded");
        let seven = SlabSize::new(Duration::from_secs(420));
        let error = check(session, &keyspace, "g", seven).await.unwrap_err();
        assert!(
            matches!(error, ConnectError::SlabSizeChanged { .. }),
            "{error:?}"
        );
        check(
            session,
            &keyspace,
            "g",
            SlabSize::new(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    }
}
