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
    ///
    /// The result keeps the invariant even from counts that drifted (see
    /// the contract of [`DeferStore`]): no key means no record, and there
    /// are never fewer records than keys. Exact counts are unaffected.
    #[must_use]
    pub fn changed(self, before: usize, after: usize) -> Self {
        let wide = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let (before, after) = (wide(before), wide(after));
        let keys = self
            .keys
            .saturating_add(u64::from(after > 0))
            .saturating_sub(u64::from(before > 0));
        let records = self.records.saturating_add(after).saturating_sub(before);
        let records = if keys == 0 { 0 } else { records.max(keys) };
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
///   [`DeferWrite::Failed`] change nothing. So, but for the drift below,
///   the counts equal what [`deferred`](Self::deferred) of every key
///   would add up to.
///   They are durable with the queues: a new owner of the partition (the
///   stores [closed](super::Stores::close) and [opened](super::Stores::open)
///   again, or another member's) reads the same counts. A backend that
///   keeps them per owner keeps them for the writes between
///   [`open`](super::Stores::open) and [`close`](super::Stores::close), as
///   the runtime makes them; writes to a partition never opened (direct
///   use) may leave them behind.
/// - A backend whose counts live with each owner (one on a server) may
///   see them drift from the queues: an old owner that still commits
///   after a rebalance (one evicted without knowing it), a commit whose
///   outcome was still unknown when the partition moved, or offsets that
///   expire by TTL can leave the records (and, for the old owner's new
///   keys, the keys) above or below what the queues hold. The drift does
///   not outlive the deferrals: counts never show records without keys
///   or fewer records than keys, a partition whose last counted key
///   completes counts zero, and an owner that opens a partition with no
///   deferred key starts from zero. A backend with one set of queues and
///   counts (the in-memory stores) stays exact.
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

#[cfg(test)]
mod tests {
    use super::DeferCounts;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// From exact counts, `changed` follows a model of the queues'
        /// lengths; from drifted counts, it keeps the invariant and ends
        /// at zero once every counted key drained.
        #[test]
        fn counts_follow_the_queues_and_drift_ends_when_they_drain(
            changes in proptest::collection::vec((0_u8..6, 0_usize..4), 0..60),
            drift in (0_u64..5, 0_u64..20),
        ) {
            let mut lengths: HashMap<u8, usize> = HashMap::new();
            let mut exact = DeferCounts::default();
            let mut drifted = DeferCounts { keys: drift.0, records: drift.1 };
            for (key, after) in changes {
                let before = lengths.insert(key, after).unwrap_or(0);
                exact = exact.changed(before, after);
                drifted = drifted.changed(before, after);
                let keys = lengths.values().filter(|length| **length > 0).count();
                let records: usize = lengths.values().sum();
                prop_assert_eq!(exact, DeferCounts { keys: keys as u64, records: records as u64 });
                prop_assert!(drifted.keys <= drifted.records);
                prop_assert_eq!(drifted.keys == 0, drifted.records == 0);
            }
            let changed = !lengths.is_empty();
            for (_, before) in lengths.drain() {
                drifted = drifted.changed(before, 0);
            }
            prop_assert!(drifted.keys <= drift.0);
            if changed && drift.0 == 0 {
                prop_assert_eq!(drifted, DeferCounts::default());
            }
        }
    }
}
