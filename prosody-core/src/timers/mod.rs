//! Persistent per-key timers as a handler sees them: scheduled through the
//! context, staged per attempt, and written only when the attempt succeeds,
//! in one batch with what the stages around it add (the attempt's unit of
//! work).

mod access;
mod due;

pub(crate) use access::{Notice, PartitionStores};
pub(crate) use due::DueQueue;

use crate::clock::Timestamp;
use crate::context::WaitMeter;
use crate::key::Key;
use crate::store::timer::{TimerKind, round_to_second};
use crate::store::{
    Batch, DedupWrite, DeferWrite, Direction, ItemRange, StateWrite, StoreError, TimerChange,
};
use bytes::Bytes;
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

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

/// A write a stage adds to an attempt's batch, to land only if the attempt
/// succeeds: the dedup record of its message, or the completion of the
/// deferred head it retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Rider {
    Dedup(DedupWrite),
    Defer(DeferWrite),
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
pub(crate) type StoreFuture<'a, T> =
    Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

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

    /// The member took the partition ([`Stores::open`](crate::store::Stores::open)).
    fn open(&self) -> StoreFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// The member let the partition go ([`Stores::close`](crate::store::Stores::close)).
    fn close(&self) {}
}

/// What every attempt of one event shares about its timers, and the
/// time its attempts waited for a scheduler permit.
#[derive(Debug, Default)]
pub(crate) struct EventState {
    /// Nanoseconds the event's attempts waited for scheduler permits.
    pub(crate) waited: AtomicU64,
    /// The timer changes the event's attempts staged, each under its
    /// attempt's number; a new attempt drops those of the earlier ones.
    staged: Mutex<Vec<(u32, TimerOp)>>,
    /// The number of the event's latest attempt.
    attempts: AtomicU32,
    /// Set once an attempt began writing its changes: from then on the
    /// event's timers may already have changed in the store.
    commit_started: AtomicBool,
    /// Set once an attempt committed its changes, so the runtime can tell
    /// whether a settled timer was already removed by its handler's commit.
    committed: AtomicBool,
    /// For a firing application timer: when the defer stage asked to run
    /// it again instead of removing it.
    retry_at: Mutex<Option<Timestamp>>,
}

/// The timers of one handler attempt, and its unit of work.
///
/// Invariant: a handler's changes (application timers) are staged under
/// the attempt's own number and reach the store only through
/// `Timers::commit`, which the handler service calls after the handler
/// succeeded, in one batch with the riders of the stages around it (a
/// dedup record, a deferred head's completion); a failed attempt's changes
/// are dropped when the next attempt starts, and never committed by it, so
/// they leave no trace unless its commit had started (a store failure
/// partway), which `commit_started` records. The event's state is one
/// allocation for all its attempts. The defer stage writes its own batches
/// (its [`TimerKind::Defer`] timers and offsets) directly, with
/// `Timers::write`.
#[derive(Clone)]
pub struct Timers {
    access: Arc<dyn StoreAccess>,
    /// Shared by the fresh copies of every attempt of the event.
    event: Arc<EventState>,
    /// The number of the attempt these timers stage for.
    attempt: u32,
    /// For a firing timer: how many times it was deferred already.
    deferrals: u32,
}

impl std::fmt::Debug for Timers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timers").finish_non_exhaustive()
    }
}

impl Timers {
    pub(crate) fn new(access: Arc<dyn StoreAccess>) -> Self {
        Self {
            access,
            event: Arc::default(),
            attempt: 0,
            deferrals: 0,
        }
    }

    /// The timers of a firing timer that was deferred `deferrals` times.
    #[must_use]
    pub(crate) fn with_deferrals(mut self, deferrals: u32) -> Self {
        self.deferrals = deferrals;
        self
    }

    /// The same timers for a new attempt: nothing staged, and what earlier
    /// attempts staged dropped.
    #[must_use]
    pub(crate) fn fresh(&self) -> Self {
        let attempt = self
            .event
            .attempts
            .fetch_add(1, Ordering::AcqRel)
            .wrapping_add(1);
        self.event
            .staged()
            .retain(|(staged_by, _)| *staged_by == attempt);
        Self {
            access: Arc::clone(&self.access),
            event: Arc::clone(&self.event),
            attempt,
            deferrals: self.deferrals,
        }
    }

    /// The meter of the event's permit waits.
    pub(crate) fn wait_meter(&self) -> WaitMeter {
        WaitMeter::of_event(Arc::clone(&self.event))
    }

    /// The same timers for another event of the key: nothing staged, not
    /// committed, no retry asked.
    #[must_use]
    pub(crate) fn detached(&self) -> Self {
        Self::new(Arc::clone(&self.access))
    }

    /// How many times the firing timer was deferred already.
    pub(crate) fn deferrals(&self) -> u32 {
        self.deferrals
    }

    /// Asks the runtime to keep the firing application timer and run it
    /// again at `at`, instead of removing it once it settles.
    pub(crate) fn retry_at(&self, at: Timestamp) {
        *self
            .event
            .retry_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(at);
    }

    /// When the firing timer is to run again, if the defer stage asked.
    pub(crate) fn retry_requested(&self) -> Option<Timestamp> {
        *self
            .event
            .retry_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether an attempt of this event began writing its changes (so the
    /// store may hold part of them).
    pub(crate) fn commit_started(&self) -> bool {
        self.event.commit_started.load(Ordering::Acquire)
    }

    /// Writes a batch now, unstaged.
    pub(crate) async fn write(&self, batch: Batch) -> Result<(), StoreError> {
        self.land(batch).await
    }

    /// Writes a batch at once when the stores can (no boxed future, no
    /// wait), else through [`StoreAccess::commit`].
    async fn land(&self, batch: Batch) -> Result<(), StoreError> {
        match self.access.commit_now(batch) {
            Ok(written) => written,
            Err(batch) => self.access.commit(batch).await,
        }
    }

    /// Whether an attempt of this event committed its changes.
    pub(crate) fn committed(&self) -> bool {
        self.event.committed.load(Ordering::Acquire)
    }

    pub(crate) fn stage(&self, op: TimerOp) {
        self.event.staged().push((self.attempt, op));
    }

    /// What this attempt staged, in order.
    fn staged(&self) -> Vec<TimerOp> {
        self.event
            .staged()
            .iter()
            .filter(|(staged_by, _)| *staged_by == self.attempt)
            .map(|(_, op)| op.clone())
            .collect()
    }

    /// The key's times as the attempt sees them: stored, then staged.
    pub(crate) async fn scheduled(&self, key: &Key) -> Result<Vec<Timestamp>, TimerError> {
        let mut times: BTreeSet<Timestamp> = self
            .access
            .scheduled(key, TimerKind::Application)
            .await?
            .into_iter()
            .collect();
        for op in self.staged() {
            match op {
                TimerOp::Schedule(time, _) => {
                    times.insert(time);
                }
                TimerOp::Unschedule(time) => {
                    times.remove(&time);
                }
                TimerOp::Clear => times.clear(),
            }
        }
        Ok(times.into_iter().collect())
    }

    /// Writes the staged changes, the `riders` and the attempt's `state`
    /// changes in one batch; called once the attempt succeeded.
    pub(crate) async fn commit(
        &self,
        key: &Key,
        riders: &[Rider],
        state: Vec<StateWrite>,
    ) -> Result<(), StoreError> {
        let ops: Vec<TimerOp> = self
            .event
            .staged()
            .extract_if(.., |(staged_by, _)| *staged_by == self.attempt)
            .map(|(_, op)| op)
            .collect();
        let mut batch = timer_batch(key, TimerKind::Application, ops);
        batch.state = state;
        for rider in riders {
            match rider {
                Rider::Dedup(write) => batch.dedup.push(*write),
                Rider::Defer(write) => batch.deferrals.push(write.clone()),
            }
        }
        if !batch.is_empty() {
            self.event.commit_started.store(true, Ordering::Release);
            self.land(batch).await?;
        }
        self.event.committed.store(true, Ordering::Release);
        Ok(())
    }
}

impl EventState {
    /// The staged changes. Nothing panics while holding the lock, so a
    /// poisoned list is consistent.
    fn staged(&self) -> std::sync::MutexGuard<'_, Vec<(u32, TimerOp)>> {
        self.staged.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Rounds a requested time to the second, as timers are stored.
pub(crate) fn rounded(time: Timestamp) -> Timestamp {
    round_to_second(time)
}

#[cfg(test)]
mod tests {
    use super::{Due, StoreAccess, StoreFuture, TimerOp, Timers};
    use crate::clock::Timestamp;
    use crate::key::Key;
    use crate::store::timer::TimerKind;
    use crate::store::{Batch, StoreError};
    use std::sync::{Arc, Mutex};

    /// Keeps every batch committed.
    #[derive(Default)]
    struct Recorded(Mutex<Vec<Batch>>);

    impl StoreAccess for Recorded {
        fn scheduled<'a>(&'a self, _: &'a Key, _: TimerKind) -> StoreFuture<'a, Vec<Timestamp>> {
            Box::pin(std::future::ready(Ok(Vec::new())))
        }

        fn commit(&self, batch: Batch) -> StoreFuture<'_, ()> {
            self.0.lock().map(|mut batches| batches.push(batch)).ok();
            Box::pin(std::future::ready(Ok::<(), StoreError>(())))
        }

        fn load(&self, _: Timestamp, _: Timestamp) -> StoreFuture<'_, Vec<Due>> {
            Box::pin(std::future::ready(Ok(Vec::new())))
        }
    }

    /// What a failed attempt staged is not written by the next one, not
    /// even what a clone of its timers stages after the next one began; the
    /// attempt that succeeds writes exactly its own changes.
    #[tokio::test]
    async fn only_the_committing_attempt_writes_its_changes() {
        let store = Arc::new(Recorded::default());
        let event = Timers::new(Arc::clone(&store) as Arc<dyn StoreAccess>);
        let key = Key::from("k");
        let at = |s: i64| Timestamp::from_millis(s * 1000);
        let failed = event.fresh();
        failed.stage(TimerOp::Schedule(at(1), None));
        let next = event.fresh();
        failed.stage(TimerOp::Schedule(at(2), None));
        next.stage(TimerOp::Schedule(at(3), None));
        assert_eq!(next.scheduled(&key).await.ok(), Some(vec![at(3)]));
        next.commit(&key, &[], Vec::new()).await.ok();
        let batches = store.0.lock().map(|b| b.clone()).unwrap_or_default();
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].timers.len(), 1, "{:?}", batches[0].timers);
        assert!(next.committed());
        // A later attempt starts with nothing staged.
        let last = event.fresh();
        last.commit(&key, &[], Vec::new()).await.ok();
        assert_eq!(store.0.lock().map(|b| b.len()).unwrap_or_default(), 1);
    }
}
