//! Persistent per-key timers: the changes a handler stages through its
//! context (written with the attempt's unit of work), the
//! timers a partition holds and fires, and the partition's store access.

mod access;
mod due;

pub(crate) use access::{Notice, PartitionStores};
pub(crate) use due::DueQueue;

use crate::clock::Timestamp;
use crate::key::Key;
use crate::store::timer::{TimerKind, round_to_second};
use crate::store::{Batch, DedupKey, Deferred, Direction, ItemRange, StoreError, TimerChange};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use std::sync::Arc;

/// A timer operation that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TimerError {
    /// This context has no timer store (a context built outside the runtime).
    #[error("timers are not available in this context")]
    Unavailable,
    /// The timer store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A change a handler made to its key's timers. A schedule carries the
/// `traceparent` of the span that made it, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TimerOp {
    Schedule(Timestamp, Option<Arc<str>>),
    Unschedule(Timestamp),
    Clear,
}

impl From<TimerOp> for TimerChange {
    fn from(op: TimerOp) -> Self {
        match op {
            TimerOp::Schedule(time, trace) => Self::Schedule { time, trace },
            TimerOp::Unschedule(time) => Self::Unschedule { time },
            TimerOp::Clear => Self::Clear,
        }
    }
}

/// The batch of a key's timer changes of one kind, in order.
pub(crate) fn timer_batch(key: &Key, kind: TimerKind, ops: Vec<TimerOp>) -> Batch {
    ops.into_iter().fold(Batch::default(), |batch, op| {
        batch.timer(key, kind, op.into())
    })
}

/// A timer of a partition as the runtime holds it: ordered by second, then
/// key, then kind, the order it fires in.
///
/// Invariant: a timer's identity is (second, key, kind); equality, order
/// and hash ignore `trace`, the span that scheduled it, which rides along.
#[derive(Clone, Debug)]
pub(crate) struct Due {
    pub(crate) second: i64,
    pub(crate) key: Key,
    pub(crate) kind: TimerKind,
    pub(crate) trace: Option<Arc<str>>,
}

impl Due {
    /// A timer with no trace.
    pub(crate) fn new(second: i64, key: Key, kind: TimerKind) -> Self {
        Self {
            second,
            key,
            kind,
            trace: None,
        }
    }

    fn identity(&self) -> (i64, &Key, TimerKind) {
        (self.second, &self.key, self.kind)
    }
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.identity().cmp(&other.identity())
    }
}

impl std::hash::Hash for Due {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

/// A boxed future of the store access (store calls that write, or read
/// timers, are off the hot path: a handler's usual commit is written at
/// once, unboxed, by [`StoreAccess::commit_now`] where the stores can).
pub(crate) type StoreFuture<'a, T> = BoxFuture<'a, Result<T, StoreError>>;

/// What the runtime gives a context to reach its partition's stores.
pub(crate) trait StoreAccess: Send + Sync {
    /// The key's stored times of `kind`, ascending.
    fn scheduled<'a>(&'a self, key: &'a Key, kind: TimerKind) -> StoreFuture<'a, Vec<Timestamp>>;

    /// Writes a batch to the partition's stores, and tells the partition of
    /// its timer changes.
    fn commit(&self, batch: Batch) -> StoreFuture<'_, ()>;

    /// What [`commit`](Self::commit) would return, written now when the
    /// stores can without I/O; `Err` gives the batch back unwritten. An
    /// implementation may give back any batch (the partition's gives back
    /// those with timer changes or state writes); the default gives back
    /// all.
    fn commit_now(&self, batch: Batch) -> Result<Result<(), StoreError>, Batch> {
        Err(batch)
    }

    /// The partition's timers with `from <= time < until`, of every kind.
    fn load(&self, from: Timestamp, until: Timestamp) -> StoreFuture<'_, Vec<Due>>;

    /// The value of a state cell of `key`.
    fn cell<'a>(
        &'a self,
        collection: &'a str,
        key: &'a Key,
        item: &'a [u8],
    ) -> StoreFuture<'a, Option<Bytes>> {
        let _ = (collection, key, item);
        Box::pin(std::future::ready(Err(StoreError::rejected(
            "this store access keeps no state",
        ))))
    }

    /// A page of state cells of `key`.
    fn cells<'a>(
        &'a self,
        collection: &'a str,
        key: &'a Key,
        range: &'a ItemRange,
        direction: Direction,
        limit: usize,
    ) -> StoreFuture<'a, Vec<(Bytes, Bytes)>> {
        let _ = (collection, key, range, direction, limit);
        Box::pin(std::future::ready(Err(StoreError::rejected(
            "this store access keeps no state",
        ))))
    }

    /// Whether the dedup store holds `key`
    /// ([`DedupStore::contains`](crate::store::DedupStore::contains)).
    fn contains(&self, key: DedupKey) -> StoreFuture<'_, bool> {
        let _ = key;
        Box::pin(std::future::ready(Err(StoreError::rejected(
            "this store access keeps no dedup records",
        ))))
    }

    /// Whether the dedup store holds `key`, if it can tell without I/O
    /// ([`DedupStore::contains_now`](crate::store::DedupStore::contains_now)).
    fn contains_now(&self, key: DedupKey) -> Option<bool> {
        let _ = key;
        None
    }

    /// Whether `key` has deferred offsets in the partition, if the store
    /// can tell without I/O ([`DeferStore::peek`](crate::store::DeferStore::peek)).
    fn peek(&self, key: &Key) -> Option<bool> {
        let _ = key;
        None
    }

    /// The deferred offsets of `key` in the partition
    /// ([`DeferStore::deferred`](crate::store::DeferStore::deferred)).
    fn deferred<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Option<Deferred>> {
        let _ = key;
        Box::pin(std::future::ready(Err(StoreError::rejected(
            "this store access keeps no deferrals",
        ))))
    }

    /// The member took the partition ([`Stores::open`](crate::store::Stores::open)).
    fn open(&self) -> StoreFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// The member let the partition go ([`Stores::close`](crate::store::Stores::close)).
    fn close(&self) {}
}

/// Rounds a requested time to the second, as timers are stored.
pub(crate) fn rounded(time: Timestamp) -> Timestamp {
    round_to_second(time)
}
