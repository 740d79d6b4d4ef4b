//! The defer store: per key of a partition, the offsets of the messages the
//! defer stage set aside after a transient failure, to retry them later in
//! offset order.
//!
//! How the defer stage uses it: on a transient failure of a message it calls
//! [`DeferStore::defer`] with the message's offset, schedules a retry timer
//! and settles the event, so the partition advances. While a key has
//! deferred messages its later messages are deferred behind them (per-key
//! order). When the timer fires, the loader reads the head offset
//! ([`DeferStore::deferred`]) back from the broker and retries it: on success
//! [`DeferStore::complete`] removes it and names the next head; on failure
//! [`DeferStore::retried`] counts the attempt, from which the stage computes
//! the next delay. The stage never needs to scan: every key with deferred
//! offsets has a defer timer in the timer store (written before the first
//! offset, replaced before it is removed), and a new owner of the partition
//! loads those timers. [`DeferStore::keys`] lists a partition's waiting
//! keys for operators and checks.

use super::StoreError;
use crate::broker::TopicPartition;
use crate::key::Key;
use std::future::Future;

/// The deferred messages of one key of one partition, as a store returns
/// them.
///
/// Invariant (of every value a [`DeferStore`] returns): `offsets` is not
/// empty and strictly ascending (so without duplicates); its first offset is
/// the head, the message to retry next, and `retries` counts the failed
/// retries of that head since it became the head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deferred {
    /// The deferred offsets, ascending, without duplicates.
    pub offsets: Vec<i64>,
    /// How many times the head (the first offset) was retried and failed.
    pub retries: u32,
}

impl Deferred {
    /// The head: the deferred message to retry next.
    #[must_use]
    pub fn head(&self) -> Option<i64> {
        self.offsets.first().copied()
    }
}

/// A persistent queue of deferred offsets per key of a partition, with the
/// retry count of each queue's head.
///
/// Contract (checked by the conformance suite, `store::conformance::defer`):
///
/// - A key's queue holds each offset deferred for it at most once, in
///   ascending order, whatever the order of the [`defer`](Self::defer) calls.
/// - [`complete`](Self::complete) removes an offset only if it is the head;
///   any other offset (queued or not) changes nothing. Either way it returns
///   the head afterwards.
/// - The retry count belongs to the head: [`retried`](Self::retried) adds
///   one; it is zero for a new head, whether the old head completed or a
///   smaller offset was deferred in front of it. Deferring an offset behind
///   the head keeps the count.
/// - A key whose last offset completes is gone: [`deferred`](Self::deferred)
///   is `None` and [`keys`](Self::keys) omits it; deferring for it again
///   starts a fresh queue.
/// - Partitions (topic and number) and keys are independent; the empty key
///   is a key like any other.
/// - [`peek`](Self::peek), when it answers, agrees with
///   [`deferred`](Self::deferred).
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

    /// Adds `offset` to the key's queue, keeping it ascending; an offset
    /// already queued is not added again.
    fn defer(
        &self,
        partition: &TopicPartition,
        key: &Key,
        offset: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The key's queue; `None` when the key has nothing deferred.
    fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Deferred>, StoreError>> + Send;

    /// Removes `offset` if it is the head (the message just handled) and
    /// starts the next head's retry count at zero; returns the head
    /// afterwards: the next one, `None` if the queue is now empty, or the
    /// unchanged head if `offset` was not the head.
    fn complete(
        &self,
        partition: &TopicPartition,
        key: &Key,
        offset: i64,
    ) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;

    /// Counts one more failed retry of the head and returns the new count
    /// (saturating at `u32::MAX`). A key with nothing deferred has no head:
    /// the call changes nothing and returns zero.
    fn retried(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> impl Future<Output = Result<u32, StoreError>> + Send;

    /// Every key of the partition that has deferred messages, in no
    /// particular order, each once.
    fn keys(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<Vec<Key>, StoreError>> + Send;
}
