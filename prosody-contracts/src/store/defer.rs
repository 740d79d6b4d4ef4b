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

/// How much of one partition is deferred: what
/// [`DeferStore::counts`] returns.
///
/// Invariant (of every value a store returns for a partition it keeps
/// exact): `keys` is the number of the partition's keys whose queue is not
/// empty, `records` the number of offsets in those queues, so `keys <=
/// records` and `keys == 0` exactly when `records == 0`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeferCounts {
    /// Keys with at least one deferred offset.
    pub keys: u64,
    /// Deferred offsets, over every key.
    pub records: u64,
}

impl DeferCounts {
    /// The counts after one key's queue went from `before` to `after`
    /// offsets (zero: the key has none), saturating at zero.
    #[must_use]
    pub fn changed(self, before: usize, after: usize) -> Self {
        let wide = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let (before, after) = (wide(before), wide(after));
        let keys = self
            .keys
            .saturating_add(u64::from(after > 0))
            .saturating_sub(u64::from(before > 0));
        let records = self.records.saturating_add(after).saturating_sub(before);
        Self { keys, records }
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
/// - [`counts`](Self::counts) of a partition are kept by the commits
///   themselves, so reading them scans nothing. After each write a commit
///   applies: a [`DeferWrite::Defer`] of an offset not queued adds one
///   record, and one key if the key had none; a [`DeferWrite::Complete`]
///   of the head removes one record, and one key if it was the key's last;
///   a [`DeferWrite::Defer`] of an offset already queued, a
///   [`DeferWrite::Complete`] of any other offset, and every
///   [`DeferWrite::Failed`] change nothing. So the counts always equal
///   what [`deferred`](Self::deferred) of every key would add up to.
///   They are durable with the queues: a new owner of the partition (the
///   stores [closed](super::Stores::close) and [opened](super::Stores::open)
///   again, or another member's) reads the same counts. A backend that
///   keeps them per owner keeps them for the writes between
///   [`open`](super::Stores::open) and [`close`](super::Stores::close), as
///   the runtime makes them; writes to a partition never opened (direct
///   use) may leave them behind.
/// - During a rebalance, an old owner that still commits (one evicted
///   without knowing it) may add offsets to queues after the new owner
///   read the counts. A backend whose counts live with each owner (one on
///   a server) need not count those: the counts are then lower than the
///   queues hold, by at most what the old owner's late writes added,
///   until those offsets complete, and never higher. A backend with one
///   set of queues and counts (the in-memory stores) stays exact.
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

    /// How many keys of the partition have deferred offsets, and how many
    /// offsets are deferred in all, as the commits so far left them (see
    /// the contract above). A backend reads them when the partition opens
    /// and answers from memory while it owns the partition.
    fn counts(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<DeferCounts, StoreError>> + Send;

    /// The partition's [`counts`](Self::counts), when the store can tell
    /// at once, without I/O; `None` means "ask `counts`" (the default).
    /// The runtime calls it after each commit that changes deferrals, to
    /// keep its gauges current without a read per event.
    fn counts_now(&self, partition: &TopicPartition) -> Option<DeferCounts> {
        let _ = partition;
        None
    }

    /// The key's queue; `None` when the key has nothing deferred.
    fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Deferred>, StoreError>> + Send;
}
