//! The defer store: per key of a partition, the offsets of the messages the
//! defer stage set aside after a transient failure, to retry them later in
//! offset order.
//!
//! How the defer stage uses it (writing each change as a
//! [`DeferWrite`] in its attempt's [`Batch`]): on a transient failure of a
//! message it defers the message's offset ([`DeferWrite::Defer`],
//! [`Deferral::AfterFailure`]), schedules a retry timer and settles the
//! event, so the partition advances. While a key has deferred messages its
//! later messages are deferred behind them ([`Deferral::Behind`], per-key
//! order). When the timer fires, the loader reads the head offset
//! ([`DeferStore::deferred`]) back from the broker and tries it: on success
//! [`DeferWrite::Complete`] removes it and the next head is tried at once;
//! on failure (of the handler, or of the read) [`DeferWrite::Failed`]
//! counts it, and the stage computes the next delay from the count. The
//! head's next attempt number and scheduling class follow from the count
//! too: a head that never ran is fresh work. The stage never needs to scan:
//! every key with deferred offsets has a defer timer in the timer store
//! (written before the first offset, replaced before it is removed), and a
//! new owner of the partition loads those timers.
//!
//! [`Batch`]: super::Batch
//! [`DeferWrite`]: super::DeferWrite
//! [`DeferWrite::Defer`]: super::DeferWrite::Defer
//! [`DeferWrite::Complete`]: super::DeferWrite::Complete
//! [`DeferWrite::Failed`]: super::DeferWrite::Failed

use super::StoreError;
use crate::broker::TopicPartition;
use crate::key::Key;
use std::future::Future;

/// The deferred messages of one key of one partition, as a store returns
/// them.
///
/// Invariant (of every value a [`DeferStore`] returns): `offsets` is not
/// empty and strictly ascending (so without duplicates); its first offset is
/// the head, the message to try next, and `failures` counts the tries of
/// that head that failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deferred {
    /// The deferred offsets, ascending, without duplicates.
    pub offsets: Vec<i64>,
    /// How many tries of the head (the first offset) failed, its handling or
    /// the read of its record: at least one for a message deferred because
    /// it failed, zero for one that waited behind and has not been tried.
    pub failures: u32,
}

/// Why an offset is deferred. It matters only when the offset becomes the
/// head on being deferred (into an empty queue, or in front of the head):
/// then it starts the head's failure count.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Deferral {
    /// Its attempt just failed: as a new head it counts one failure.
    AfterFailure,
    /// It waits behind its key's backlog and has not run: as a new head it
    /// counts none.
    Behind,
}

impl Deferral {
    /// The failure count of an offset that becomes the head this way.
    #[must_use]
    pub fn failures(self) -> u32 {
        match self {
            Self::AfterFailure => 1,
            Self::Behind => 0,
        }
    }
}

impl Deferred {
    /// The head: the deferred message to retry next.
    #[must_use]
    pub fn head(&self) -> Option<i64> {
        self.offsets.first().copied()
    }
}

/// The reads of a persistent queue of deferred offsets per key of a
/// partition, with the failure count of each queue's head. The queues are
/// written by [`Stores::commit`] alone, as [`DeferWrite`]s.
///
/// Contract (checked by the conformance suite, `prosody_conformance::store::defer`),
/// for the writes a commit applies and the reads here:
///
/// - A key's queue holds each offset deferred for it at most once, in
///   ascending order, whatever the order of the [`DeferWrite::Defer`]s.
/// - [`DeferWrite::Complete`] removes an offset only if it is the head;
///   any other offset (queued or not) changes nothing.
/// - The failure count belongs to the head: [`DeferWrite::Failed`] adds
///   one (saturating at `u32::MAX`), and changes nothing for a key with
///   nothing deferred. A head that completes leaves the next head at zero;
///   an offset deferred in front of the head (or into an empty queue)
///   becomes the head with the count of its [`Deferral`]. Deferring an
///   offset behind the head, or one already queued, keeps the count.
/// - A key whose last offset completes is gone: [`deferred`](Self::deferred)
///   is `None`; deferring for it again starts a fresh queue.
/// - Partitions (topic and number) and keys are independent; the empty key
///   is a key like any other.
/// - [`peek`](Self::peek), when it answers, agrees with
///   [`deferred`](Self::deferred).
///
/// [`Stores::commit`]: super::Stores::commit
/// [`DeferWrite`]: super::DeferWrite
/// [`DeferWrite::Defer`]: super::DeferWrite::Defer
/// [`DeferWrite::Complete`]: super::DeferWrite::Complete
/// [`DeferWrite::Failed`]: super::DeferWrite::Failed
pub trait DeferStore: Clone + Send + Sync + 'static {
    /// Whether the key has deferred messages, when the store can tell at
    /// once, without I/O: `Some(true)` exactly when
    /// [`deferred`](Self::deferred) would return `Some`. `None` means "ask
    /// `deferred`"; the default never knows. The defer stage calls it for
    /// every message, so a store that can answer spares the hot path a
    /// round trip and an allocation.
    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        let _ = (partition, key);
        None
    }

    /// The key's queue; `None` when the key has nothing deferred.
    fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Deferred>, StoreError>> + Send;
}
