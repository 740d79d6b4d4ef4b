//! The real servers a backend's tests run against (Kafka, Cassandra),
//! found through the environment that `scripts/services env` prints.
//!
//! A suite whose server is absent prints one line saying it did not run,
//! and passes; with `PROSODY_REQUIRE_SERVICES=true` (as `.ci/run` sets) an
//! absent server fails it instead, so nothing is skipped in CI.

use std::collections::HashSet;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// The variable naming Kafka's bootstrap servers.
pub const KAFKA: &str = "PROSODY_BOOTSTRAP_SERVERS";

/// The variable naming Cassandra's contact points.
pub const CASSANDRA: &str = "PROSODY_CASSANDRA_NODES";

/// The value of `variable`, or `None` when it is unset or empty, after one
/// line on stderr per `suite` saying the suite did not run.
///
/// # Panics
///
/// When the variable is unset and `PROSODY_REQUIRE_SERVICES` is `true`:
/// the suite must not pass without its server.
#[must_use]
pub fn server(variable: &str, suite: &str) -> Option<String> {
    static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    if let Some(value) = std::env::var(variable)
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        return Some(value);
    }
    let required = std::env::var("PROSODY_REQUIRE_SERVICES").is_ok_and(|v| v == "true");
    assert!(
        !required,
        "{suite}: {variable} is not set, and PROSODY_REQUIRE_SERVICES=true"
    );
    let mut said = SAID.lock().unwrap_or_else(PoisonError::into_inner);
    if said
        .get_or_insert_with(HashSet::new)
        .insert(suite.to_owned())
    {
        // Straight to the stream: the test harness captures `eprintln!`,
        // and shows a passing test's output to no one.
        let _ = writeln!(
            std::io::stderr(),
            "{suite}: did not run: {variable} is not set (start the servers with `scripts/services start` and `eval \"$(scripts/services env)\"`)"
        );
    }
    None
}

/// A name no other test, process or run uses: topics, groups, keyspaces
/// (letters, digits and `_` only, which every one of them accepts).
#[must_use]
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    // Wall-clock milliseconds only make runs distinct; nothing is timed.
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{prefix}_{}_{run}_{n}", std::process::id())
}
