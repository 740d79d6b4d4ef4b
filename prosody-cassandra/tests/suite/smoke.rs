//! Apache Cassandra (from `scripts/services`, with password authentication)
//! and the `scylla` driver do what the Cassandra stores rely on: a
//! login, prepared statements, `USING TTL`, `USING TIMESTAMP`, lightweight
//! transactions, clustering-range reads in both orders with paging, and
//! unlogged batches. This catches a server or driver regression before the
//! stores depend on it. Without `PROSODY_CASSANDRA_NODES` the suite
//! prints one line and does not run.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code fails loudly"
)]

use futures_util::TryStreamExt as _;
use prosody_conformance::services;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::batch::{Batch, BatchType};
use std::time::Duration;

const SUITE: &str = "prosody-cassandra/tests/suite/smoke.rs (real Cassandra)";

struct Cassandra {
    nodes: Vec<String>,
    user: String,
    password: String,
}

impl Cassandra {
    fn find() -> Option<Self> {
        let nodes = services::server(services::CASSANDRA, SUITE)?;
        let var = |name| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
        Some(Self {
            nodes: nodes.split(',').map(str::to_owned).collect(),
            user: var("PROSODY_CASSANDRA_USER"),
            password: var("PROSODY_CASSANDRA_PASSWORD"),
        })
    }

    fn builder(&self, password: &str) -> SessionBuilder {
        SessionBuilder::new()
            .known_nodes(&self.nodes)
            .user(self.user.as_str(), password)
            .connection_timeout(Duration::from_secs(10))
    }
}

/// A keyspace of its own and the table every check writes.
async fn table(session: &Session) -> String {
    let keyspace = services::unique("smoke");
    session
        .query_unpaged(
            format!(
                "CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
            ),
            &[],
        )
        .await
        .unwrap();
    session
        .query_unpaged(
            format!(
                "CREATE TABLE {keyspace}.cells (p text, c int, v text, PRIMARY KEY (p, c)) WITH CLUSTERING ORDER BY (c ASC)"
            ),
            &[],
        )
        .await
        .unwrap();
    session.await_schema_agreement().await.unwrap();
    keyspace
}

/// The value of cell (p, c), if it is there.
async fn value(session: &Session, keyspace: &str, p: &str, c: i32) -> Option<String> {
    let select = session
        .prepare(format!(
            "SELECT v FROM {keyspace}.cells WHERE p = ? AND c = ?"
        ))
        .await
        .unwrap();
    let rows = session
        .execute_unpaged(&select, (p, c))
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    rows.maybe_first_row::<(String,)>().unwrap().map(|(v,)| v)
}

/// A session and a keyspace of its own, or `None` without Cassandra.
async fn session() -> Option<(Session, String)> {
    let cassandra = Cassandra::find()?;
    let session = cassandra
        .builder(&cassandra.password)
        .build()
        .await
        .unwrap();
    let keyspace = table(&session).await;
    Some((session, keyspace))
}

async fn drop_keyspace(session: &Session, keyspace: &str) {
    session
        .query_unpaged(format!("DROP KEYSPACE {keyspace}"), &[])
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_timestamps_and_lightweight_transactions_behave() {
    let Some((session, keyspace)) = session().await else {
        return;
    };
    let ks = keyspace.as_str();

    // USING TTL: the cell is there at once, and expires by itself.
    let expiring = session
        .prepare(format!(
            "INSERT INTO {ks}.cells (p, c, v) VALUES (?, ?, ?) USING TTL 3"
        ))
        .await
        .unwrap();
    session
        .execute_unpaged(&expiring, ("ttl", 0, "soon gone"))
        .await
        .unwrap();
    assert_eq!(
        value(&session, ks, "ttl", 0).await.as_deref(),
        Some("soon gone")
    );
    let expired = async {
        while value(&session, ks, "ttl", 0).await.is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), expired)
        .await
        .expect("a cell written with a TTL of 3 s expires");

    // USING TIMESTAMP: the later timestamp wins, whatever arrives last.
    let stamped = session
        .prepare(format!(
            "INSERT INTO {ks}.cells (p, c, v) VALUES (?, ?, ?) USING TIMESTAMP ?"
        ))
        .await
        .unwrap();
    session
        .execute_unpaged(&stamped, ("ts", 0, "newer", 2_000_i64))
        .await
        .unwrap();
    session
        .execute_unpaged(&stamped, ("ts", 0, "older", 1_000_i64))
        .await
        .unwrap();
    assert_eq!(value(&session, ks, "ts", 0).await.as_deref(), Some("newer"));

    // A lightweight transaction applies once.
    let once = session
        .prepare(format!(
            "INSERT INTO {ks}.cells (p, c, v) VALUES (?, ?, ?) IF NOT EXISTS"
        ))
        .await
        .unwrap();
    for (expected, v) in [(true, "first"), (false, "second")] {
        let rows = session
            .execute_unpaged(&once, ("lwt", 0, v))
            .await
            .unwrap()
            .into_rows_result()
            .unwrap();
        let (applied,) = rows.first_row::<(bool,)>().unwrap_or_else(|_| {
            // When not applied, the row also holds the existing cell.
            let (applied, _, _, _) = rows.first_row::<(bool, String, i32, String)>().unwrap();
            (applied,)
        });
        assert_eq!(applied, expected, "IF NOT EXISTS with {v}");
    }
    assert_eq!(
        value(&session, ks, "lwt", 0).await.as_deref(),
        Some("first")
    );

    drop_keyspace(&session, ks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_and_clustering_ranges_in_both_orders_behave() {
    let Some((session, keyspace)) = session().await else {
        return;
    };
    let ks = keyspace.as_str();
    // An unlogged batch within one partition.
    let insert = session
        .prepare(format!("INSERT INTO {ks}.cells (p, c, v) VALUES (?, ?, ?)"))
        .await
        .unwrap();
    let mut batch = Batch::new(BatchType::Unlogged);
    let cells: Vec<(&str, i32, String)> = (0..10).map(|c| ("range", c, format!("v{c}"))).collect();
    for _ in &cells {
        batch.append_statement(insert.clone());
    }
    session.batch(&batch, &cells).await.unwrap();

    // Clustering ranges in both orders, two rows a page.
    for (order, expected) in [("ASC", [3, 4, 5, 6]), ("DESC", [6, 5, 4, 3])] {
        let mut range = session
            .prepare(format!(
                "SELECT c FROM {ks}.cells WHERE p = ? AND c >= ? AND c < ? ORDER BY c {order}"
            ))
            .await
            .unwrap();
        range.set_page_size(2);
        let read: Vec<i32> = session
            .execute_iter(range, ("range", 3, 7))
            .await
            .unwrap()
            .rows_stream::<(i32,)>()
            .unwrap()
            .map_ok(|(c,)| c)
            .try_collect()
            .await
            .unwrap();
        assert_eq!(read, expected, "{order}");
    }
    drop_keyspace(&session, ks).await;
}

/// A wrong password fails the connection with an error that names the
/// authentication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_refused_naming_authentication() {
    let Some(cassandra) = Cassandra::find() else {
        return;
    };
    let error = cassandra
        .builder("not-the-password")
        .build()
        .await
        .expect_err("a wrong password is refused");
    let shown = error.to_string();
    assert!(
        shown.contains("uthentication") || shown.contains("password are incorrect"),
        "{shown}"
    );
}
