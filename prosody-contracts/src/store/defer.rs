//! The defer store: per key of a partition, the offsets of the messages the
//! defer stage set aside after a transient failure, to retry them later in
//! offset order.
//!
//! How the defer stage uses it: on a transient failure of a message it calls
//! [`DeferStore::defer`] with the message's offset
//! ([`Deferral::AfterFailure`]), schedules a retry timer and settles the
//! event, so the partition advances. While a key has deferred messages its
//! later messages are deferred behind them ([`Deferral::Behind`], per-key
//! order). When the timer fires, the loader reads the head offset
//! ([`DeferStore::deferred`]) back from the broker and tries it: on success
//! [`DeferStore::complete`] removes it and names the next head, tried at
//! once; on failure (of the handler, or of the read) [`DeferStore::failed`]
//! counts it, and the stage computes the next delay from the count. The
//! head's next attempt number and scheduling class follow from the count
//! too: a head that never ran is fresh work. The stage never needs to scan:
//! every key with deferred offsets has a defer timer in the timer store (written before the first
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

/// A persistent queue of deferred offsets per key of a partition, with the
/// failure count of each queue's head.
///
/// Contract (checked by the conformance suite, `store::conformance::defer`):
///
/// - A key's queue holds each offset deferred for it at most once, in
///   ascending order, whatever the order of the [`defer`](Self::defer) calls.
/// - [`complete`](Self::complete) removes an offset only if it is the head;
///   any other offset (queued or not) changes nothing. Either way it returns
///   the head afterwards.
/// - The failure count belongs to the head: [`failed`](Self::failed) adds
///   one. A head that completes leaves the next head at zero; an offset
///   deferred in front of the head (or into an empty queue) becomes the head
///   with the count of its [`Deferral`]. Deferring an offset behind the
///   head, or one already queued, keeps the count.
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
    /// already queued is not added again. An offset that becomes the head
    /// starts with the failure count of `deferral`.
    fn defer(
        &self,
        partition: &TopicPartition,
        key: &Key,
        offset: i64,
        deferral: Deferral,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The key's queue; `None` when the key has nothing deferred.
    fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Deferred>, StoreError>> + Send;

    /// Removes `offset` if it is the head (the message just handled) and
    /// starts the next head's failure count at zero; returns the head
    /// afterwards: the next one, `None` if the queue is now empty, or the
    /// unchanged head if `offset` was not the head.
    fn complete(
        &self,
        partition: &TopicPartition,
        key: &Key,
        offset: i64,
    ) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;

    /// Counts one more failed attempt of the head and returns the new count
    /// (saturating at `u32::MAX`). A key with nothing deferred has no head:
    /// the call changes nothing and returns zero.
    fn failed(
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
