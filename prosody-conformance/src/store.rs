//! The store conformance suites: one per store trait, generic over the
//! backend, which every backend (memory, Cassandra, any later one) runs.
//!
//! The store traits hold only reads, so every suite writes through
//! [`Stores::commit`] and observes through the reads; a suite is generic
//! over `S: Stores`. The exception is the peer directory ([`directory`]),
//! written directly (a registration is no attempt's change): its suite is
//! generic over `D: PeerDirectory`. A check reports what differed as a [`Failure`] (the
//! broker suite's type); it never panics, and every store call has a
//! deadline.

pub mod dedup;
pub mod defer;
pub mod directory;
pub mod state;
pub mod stores;
pub mod timer;

use crate::broker::Failure;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::store::{Batch, StoreError, Stores};
use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;
use tokio::time::timeout;

/// The longest any one store call of a suite may take.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The result of one check.
pub(crate) type Checked = Result<(), Failure>;

/// Runs one store call within [`DEADLINE`], naming it in any failure.
pub(crate) async fn call<T>(
    what: &str,
    future: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, Failure> {
    match timeout(DEADLINE, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(Failure::new(format!("{what} failed: {error}"))),
        Err(_) => Err(Failure::new(format!(
            "{what} took longer than {DEADLINE:?}"
        ))),
    }
}

/// Writes `batch` with [`Stores::commit`], within [`DEADLINE`], naming
/// `what` (the write, as a single call would read) in any failure.
pub(crate) async fn commit(
    stores: &impl Stores,
    what: &str,
    partition: &TopicPartition,
    batch: Batch,
) -> Checked {
    let what = format!("commit({partition}) of {what}");
    call(&what, stores.commit(partition, batch)).await
}

/// A failure naming `what` unless `got` equals `expected`.
pub(crate) fn ensure_eq<T: PartialEq + Debug>(what: &str, expected: &T, got: &T) -> Checked {
    if expected == got {
        Ok(())
    } else {
        Err(Failure::new(format!(
            "{what}: expected {expected:?}, got {got:?}"
        )))
    }
}
