//! One attempt's writes, and the stores that take them together.
//!
//! Everything an attempt changes (its handler's timers and keyed state, the
//! dedup record of its message, the deferral bookkeeping of the defer
//! stage) is gathered in
//! one [`Batch`] and written with one [`Stores::commit`] once the attempt
//! succeeded, before its event settles. A failed attempt writes nothing.

use super::dedup::{DedupKey, DedupStore};
use super::defer::{DeferStore, Deferral};
use super::state::{StateStore, StateWrite};
use super::timer::{TimerKind, TimerStore};
use super::{AnyStores, StoreError};
use crate::broker::TopicPartition;
use crate::clock::Timestamp;
use crate::key::Key;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// A change to one key's timers of one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimerChange {
    /// Adds the timer at `time`, scheduled by the span `trace`.
    Schedule {
        /// When it fires (rounded to the second by the store).
        time: Timestamp,
        /// The W3C `traceparent` of the scheduling span.
        trace: Option<Arc<str>>,
    },
    /// Removes the timer at `time`.
    Unschedule {
        /// Its time.
        time: Timestamp,
    },
    /// Removes every timer of the key and kind.
    Clear,
}

/// A change to a key's timers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerWrite {
    /// The key.
    pub key: Key,
    /// Whose timers.
    pub kind: TimerKind,
    /// The change.
    pub change: TimerChange,
}

/// A change to a key's deferred offsets (their contract is
/// [`DeferStore`]'s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeferWrite {
    /// Adds `offset` to the key's queue, keeping it ascending; an offset
    /// already queued is not added again. An offset that becomes the head
    /// starts with the failure count of `deferral`.
    Defer {
        /// The key.
        key: Key,
        /// The record's offset.
        offset: i64,
        /// Why it is deferred.
        deferral: Deferral,
    },
    /// Removes `offset` if it is the head (the message just handled) and
    /// starts the next head's failure count at zero; any other offset
    /// changes nothing.
    Complete {
        /// The key.
        key: Key,
        /// The head's offset.
        offset: i64,
    },
    /// Counts one more failed attempt of the head (saturating at
    /// `u32::MAX`); a key with nothing deferred has no head, and nothing
    /// changes.
    Failed {
        /// The key.
        key: Key,
    },
}

/// A handled message to remember for deduplication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DedupWrite {
    /// Its dedup key.
    pub key: DedupKey,
    /// How long to remember it.
    pub ttl: Duration,
}

/// Everything one attempt writes to one partition's stores, in order.
///
/// Invariant: the writes of each store are applied in the order given, and
/// every write but [`DeferWrite::Failed`] is idempotent (applying such a
/// batch twice leaves what applying it once does), so a batch that failed
/// partway can be written again. A failure counted twice only lengthens
/// the next retry delay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Timer changes, in order.
    pub timers: Vec<TimerWrite>,
    /// Deferral changes, in order.
    pub deferrals: Vec<DeferWrite>,
    /// Keyed-state changes, in order.
    pub state: Vec<StateWrite>,
    /// Dedup records.
    pub dedup: Vec<DedupWrite>,
}

impl Batch {
    /// Whether the batch writes nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.timers.is_empty()
            && self.deferrals.is_empty()
            && self.state.is_empty()
            && self.dedup.is_empty()
    }

    /// How many writes the batch holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.timers.len() + self.deferrals.len() + self.state.len() + self.dedup.len()
    }

    /// The same batch with a timer change.
    #[must_use]
    pub fn timer(mut self, key: &Key, kind: TimerKind, change: TimerChange) -> Self {
        self.timers.push(TimerWrite {
            key: key.clone(),
            kind,
            change,
        });
        self
    }

    /// The same batch with a deferral change.
    #[must_use]
    pub fn deferral(mut self, write: DeferWrite) -> Self {
        self.deferrals.push(write);
        self
    }
}

/// The stores of one client: its timers, deferrals, keyed state and dedup
/// records, in one backend, for one consumer group.
///
/// [`commit`](Self::commit) is the one way to write them (besides
/// [`StateStore::identify`]); the supertraits hold only reads. What each
/// write does is its store's contract ([`TimerStore`], [`DeferStore`],
/// [`DedupStore`], [`StateStore`]).
///
/// Contract (checked by the conformance suite, `prosody_conformance::store::stores`):
/// - a store instance belongs to one consumer group: two instances for two
///   groups on one backend (one Cassandra keyspace, say) never see each
///   other's data;
/// - [`commit`](Self::commit) applies a batch so that, once it returns
///   `Ok`, every write is durable and visible to every read, each store's
///   writes in their order (a clear then a schedule of one key keeps the
///   schedule). On `Err` some writes may have landed: the caller writes the
///   whole batch again (writes are idempotent) or gives up on the attempt.
///   What a backend adds (atomicity across the writes) it says itself;
/// - one member writes a partition at a time: the runtime writes a
///   partition's stores only while it owns the partition and stops before
///   it lets the partition go. A member that lost its partition without
///   knowing (evicted by its group while it still runs) may still commit:
///   its writes are of the same idempotent kinds, for records the new owner
///   handles again, so at worst they repeat the new owner's (a timer
///   scheduled twice is one timer, an offset deferred twice is deferred
///   once) or count a failure twice (a longer retry delay).
///
/// Ownership: the runtime calls [`open`](Self::open) when this member
/// takes a partition, before it handles any of its events, and
/// [`close`](Self::close) once it let the partition go; a backend that
/// caches what it read of a partition (the answers of
/// [`DeferStore::peek`], say) keeps the cache between the two and forgets
/// it at `close`, because another member may write the partition next.
pub trait Stores: TimerStore + DeferStore + DedupStore + StateStore + Clone {
    /// Whether the stores keep their data outside this process, so that it
    /// survives a restart and a read costs a round trip (a server's do; the
    /// in-memory stores do not). A client keeps a disk cache of keyed
    /// state only over durable stores.
    fn durable(&self) -> bool;

    /// This member now owns `partition`. The default does nothing. The
    /// runtime handles nothing of the partition, and so writes nothing,
    /// until an open succeeds: it logs an error and tries again (after 1 s,
    /// doubling to 30 s), the records waiting meanwhile.
    fn open(
        &self,
        partition: &TopicPartition,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = partition;
        std::future::ready(Ok(()))
    }

    /// This member let `partition` go (or never got to open it). The
    /// default does nothing.
    fn close(&self, partition: &TopicPartition) {
        let _ = partition;
    }

    /// Writes one attempt's batch for `partition`, each store's writes in
    /// the batch's order, as the contract above says: once it returns `Ok`,
    /// every write is durable and visible to every read.
    fn commit(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Writes one attempt's batch at once, when the backend can without
    /// I/O (one in memory): `Ok` holds what [`commit`](Self::commit) would
    /// have returned, with the same contract. `Err` gives the batch back
    /// untouched, nothing of it written, for `commit`. The default always
    /// gives it back. The runtime offers here every batch it writes for a
    /// partition that holds only dedup records and deferral changes (the
    /// usual commit of a handler's successful attempt); a backend that
    /// takes it spares the hot path a boxed future and a wait. Every other
    /// batch goes to `commit`.
    ///
    /// # Errors
    ///
    /// `Err(batch)` when the backend cannot write at once; `Ok(Err(_))`
    /// when it wrote at once and failed, as `commit` fails.
    fn commit_now(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> Result<Result<(), StoreError>, Batch> {
        let _ = partition;
        Err(batch)
    }

    /// These stores behind one pointer. Stores that are erased already
    /// ([`AnyStores`]) are themselves: erasing never stacks pointers.
    #[must_use]
    fn erase(self) -> AnyStores {
        AnyStores::boxed(self)
    }
}
