//! The broker conformance suite: the checks every broker backend must pass.
//!
//! A backend implements [`Harness`] (a broker plus a way to create topics)
//! and runs each check, typically as one test per check, or all of them with
//! [`run_all`]. Each check creates its own uniquely named topics and groups,
//! so checks can share one cluster. Every wait has a deadline
//! ([`Harness::deadline`]); nothing sleeps to synchronise, so the suite runs
//! the same under a paused tokio clock and against a real broker. The one
//! bounded wait for absence ([`Harness::quiet_period`], in
//! [`pause_and_resume`]) passes instantly under a paused clock.
//!
//! A check reports what differed as a [`Failure`]; it never panics.

mod driver;
mod fixture;
mod membership;
mod offsets;
mod records;
mod topics;

pub use membership::{
    close_moves_partitions, drop_moves_partitions, group_splits_partitions,
    revocation_hands_over_committed_offsets,
};
pub use offsets::{
    committed_reads_back, pause_and_resume, resume_from_committed, store_offset_requires_assignment,
};
pub use records::{keys_choose_partitions, read_by_offset, round_trip};
pub use topics::partitions_report_counts;

use prosody_contracts::broker::{Broker, BrokerError};
use std::future::Future;
use std::time::Duration;

/// What a backend provides to run the suite.
pub trait Harness: Send + Sync {
    /// The broker under test.
    type Broker: Broker;

    /// A handle to the broker; every call reaches the same cluster.
    fn broker(&self) -> Self::Broker;

    /// Creates a topic and returns once producers and consumers can use it.
    fn create_topic(
        &self,
        name: &str,
        partitions: i32,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// How long any one wait of a check may take before it fails.
    fn deadline(&self) -> Duration {
        Duration::from_secs(30)
    }

    /// How long [`pause_and_resume`] watches a paused partition stay silent.
    fn quiet_period(&self) -> Duration {
        Duration::from_secs(1)
    }
}

/// A check that failed, with what was expected and what happened.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Failure(String);

impl Failure {
    /// A failure with a message.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    /// The message.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.0
    }
}

type Checked<T = ()> = Result<T, Failure>;

/// Runs every check; the failure names each check that failed.
pub async fn run_all(harness: &impl Harness) -> Checked {
    let mut failures = Vec::new();
    let mut record = |name: &str, result: Checked| {
        if let Err(failure) = result {
            failures.push(format!("{name}: {failure}"));
        }
    };
    record("round_trip", round_trip(harness).await);
    record(
        "keys_choose_partitions",
        keys_choose_partitions(harness).await,
    );
    record("read_by_offset", read_by_offset(harness).await);
    record(
        "partitions_report_counts",
        partitions_report_counts(harness).await,
    );
    record(
        "group_splits_partitions",
        group_splits_partitions(harness).await,
    );
    record(
        "close_moves_partitions",
        close_moves_partitions(harness).await,
    );
    record(
        "drop_moves_partitions",
        drop_moves_partitions(harness).await,
    );
    record(
        "revocation_hands_over_committed_offsets",
        revocation_hands_over_committed_offsets(harness).await,
    );
    record(
        "resume_from_committed",
        resume_from_committed(harness).await,
    );
    record("committed_reads_back", committed_reads_back(harness).await);
    record("pause_and_resume", pause_and_resume(harness).await);
    record(
        "store_offset_requires_assignment",
        store_offset_requires_assignment(harness).await,
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(Failure(failures.join("\n")))
    }
}
