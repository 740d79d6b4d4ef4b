//! One partition's stores: the client's, bound to the partition, with
//! notices to its task so what it holds in memory follows what handlers
//! change.

mod tally;

pub(crate) use tally::Tally;

use crate::broker::TopicPartition;
use crate::clock::Timestamp;
use crate::key::Key;
use crate::store::timer::{TimerKind, to_seconds};
use crate::store::{
    AnyStores, Batch, DedupKey, DedupStore, DeferStore, Deferred, Direction, ItemRange, StateStore,
    StoreError, Stores, TimerChange, TimerStore,
};
use crate::timers::Due;
use bytes::Bytes;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::mpsc;
use tracing::debug;

/// A change the partition task applies to its due queue.
#[derive(Debug)]
pub(crate) enum Notice {
    Scheduled(Due),
    Unscheduled(Key, i64, TimerKind),
    Cleared(Key, TimerKind),
    /// A commit failed, and may have landed in part: what is held is no
    /// longer known to match the store, so it is read again.
    Resync,
}

/// The stores of one partition, for its handlers' contexts, its stages and
/// its timers: the client's stores (erased once, so a read that waits
/// passes one pointer and one boxed future) bound to the partition.
///
/// Invariant: a batch reaches the stores before the notices of its timer
/// changes are sent, so the partition task never holds a timer the store
/// does not (a notice that arrives after a reload of the same timer is
/// harmless: inserts are idempotent). A batch with timer changes that
/// fails, or is dropped before it returns, may have landed in part, so it
/// sends [`Notice::Resync`] instead: the task reads the store again rather
/// than guess.
/// A reader's (no owner) writes nothing and takes nothing: every commit is
/// refused, and opening and closing leave the stores alone.
pub(crate) struct PartitionStores {
    stores: AnyStores,
    partition: TopicPartition,
    /// The owner's side: `None` for a partition this member only reads.
    owner: Option<Owner>,
}

/// What the member that owns a partition keeps of it beside its stores.
struct Owner {
    /// Tells the partition task of the timer changes committed.
    notices: mpsc::UnboundedSender<Notice>,
    /// The partition's deferred keys and records: read at open, then
    /// after each commit that changes deferrals.
    deferred: Arc<Tally>,
}

/// A commit whose outcome is not known yet: dropped while armed, it asks
/// the partition task to read the store again.
struct Unsure<'a> {
    notices: &'a mpsc::UnboundedSender<Notice>,
    armed: bool,
}

impl Drop for Unsure<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.notices.send(Notice::Resync);
        }
    }
}

impl PartitionStores {
    /// `partition` of `stores`, telling its task of timer changes through
    /// `notices` and keeping its deferred counts in `deferred`.
    pub(crate) fn new(
        stores: AnyStores,
        partition: TopicPartition,
        notices: mpsc::UnboundedSender<Notice>,
        deferred: Arc<Tally>,
    ) -> Self {
        Self {
            stores,
            partition,
            owner: Some(Owner { notices, deferred }),
        }
    }

    /// `partition` of `stores` for reading alone (a partition of a
    /// published collection), allocating nothing of an owner's.
    pub(crate) fn reader(stores: AnyStores, partition: TopicPartition) -> Self {
        Self {
            stores,
            partition,
            owner: None,
        }
    }

    /// Takes the partition ([`Stores::open`]), then reads its deferred
    /// counts (a failed read is logged: the gauges report none until a
    /// commit tells). A reader takes nothing.
    pub(crate) async fn open(&self) -> Result<(), StoreError> {
        let Some(owner) = &self.owner else {
            return Ok(());
        };
        self.stores.open(&self.partition).await?;
        self.count(owner).await;
        Ok(())
    }

    /// Reads the partition's deferred counts: at once where the stores
    /// can, else with a read.
    async fn count(&self, owner: &Owner) {
        if owner
            .deferred
            .refresh(|| self.stores.counts_now(&self.partition))
        {
            return;
        }
        match self.stores.counts(&self.partition).await {
            Ok(counts) => owner.deferred.set(counts),
            Err(error) => {
                debug!(partition = %self.partition, %error, "reading the deferred counts failed");
            }
        }
    }

    /// The member let the partition go ([`Stores::close`]); a reader
    /// held nothing.
    pub(crate) fn close(&self) {
        if self.owner.is_some() {
            self.stores.close(&self.partition);
        }
    }

    /// Writes a batch to the partition's stores, then tells the partition
    /// of its timer changes.
    pub(crate) async fn commit(&self, batch: Batch) -> Result<(), StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
        let Some(owner) = &self.owner else {
            return Err(StoreError::rejected("a published collection is read-only"));
        };
        let deferrals = !batch.deferrals.is_empty();
        let notices: Vec<Notice> = batch
            .timers
            .iter()
            .map(|write| {
                let key = write.key.clone();
                match &write.change {
                    TimerChange::Schedule { time, trace } => {
                        let mut due = Due::new(to_seconds(*time), key, write.kind);
                        due.trace.clone_from(trace);
                        Notice::Scheduled(due)
                    }
                    TimerChange::Unschedule { time } => {
                        Notice::Unscheduled(key, to_seconds(*time), write.kind)
                    }
                    TimerChange::Clear => Notice::Cleared(key, write.kind),
                }
            })
            .collect();
        // Sends `Resync` unless the commit returns `Ok`: also when the
        // commit is dropped midway (by the attempt's deadline, say).
        let mut unsure = Unsure {
            notices: &owner.notices,
            armed: !notices.is_empty(),
        };
        self.stores.commit(&self.partition, batch).await?;
        unsure.armed = false;
        for notice in notices {
            // The partition task is gone after a revocation: its next owner
            // loads the store.
            let _ = owner.notices.send(notice);
        }
        if deferrals {
            self.count(owner).await;
        }
        Ok(())
    }

    /// What [`commit`](Self::commit) would return, written now when the
    /// stores can without I/O; `Err` gives the batch back unwritten. Only a
    /// batch of dedup records and deferral changes is offered: it sends no
    /// notice and writes no state cell. Any other goes through `commit`.
    pub(crate) fn commit_now(&self, batch: Batch) -> Result<Result<(), StoreError>, Batch> {
        if batch.is_empty() {
            return Ok(Ok(()));
        }
        let Some(owner) = &self.owner else {
            return Err(batch);
        };
        if !batch.timers.is_empty() || !batch.state.is_empty() {
            return Err(batch);
        }
        if batch.deferrals.is_empty() {
            return self.stores.commit_now(&self.partition, batch);
        }
        let written = self.stores.commit_now(&self.partition, batch)?;
        if written.is_ok() {
            // A store that writes at once counts at once; one that cannot
            // is read again at the next commit.
            owner
                .deferred
                .refresh(|| self.stores.counts_now(&self.partition));
        }
        Ok(written)
    }

    /// The key's stored times of `kind`, ascending.
    pub(crate) fn scheduled(
        &self,
        key: &Key,
        kind: TimerKind,
    ) -> impl Future<Output = Result<Vec<Timestamp>, StoreError>> + Send {
        self.stores.scheduled(&self.partition, key, kind)
    }

    /// The partition's timers with `from <= time < until`, of every kind.
    pub(crate) async fn load(
        &self,
        from: Timestamp,
        until: Timestamp,
    ) -> Result<Vec<Due>, StoreError> {
        let entries = self.stores.load(&self.partition, from, until).await?;
        Ok(entries
            .into_iter()
            .map(|entry| Due {
                second: to_seconds(entry.time),
                key: entry.key,
                kind: entry.kind,
                trace: entry.trace,
            })
            .collect())
    }

    /// The value of a state cell of `key`.
    pub(crate) fn cell(
        &self,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> impl Future<Output = Result<Option<Bytes>, StoreError>> + Send {
        self.stores.cell(&self.partition, collection, key, item)
    }

    /// A page of state cells of `key`.
    pub(crate) fn cells(
        &self,
        collection: &str,
        key: &Key,
        range: &ItemRange,
        direction: Direction,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(Bytes, Bytes)>, StoreError>> + Send {
        self.stores
            .cells(&self.partition, collection, key, range, direction, limit)
    }

    /// Whether the dedup store holds `key`.
    pub(crate) fn contains(
        &self,
        key: DedupKey,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.stores.contains(key)
    }

    /// Whether the dedup store holds `key`, if it can tell without I/O.
    pub(crate) fn contains_now(&self, key: DedupKey) -> Option<bool> {
        self.stores.contains_now(key)
    }

    /// Whether `key` has deferred offsets in the partition, if the store
    /// can tell without I/O.
    pub(crate) fn peek(&self, key: &Key) -> Option<bool> {
        self.stores.peek(&self.partition, key)
    }

    /// The deferred offsets of `key` in the partition.
    pub(crate) fn deferred(
        &self,
        key: &Key,
    ) -> impl Future<Output = Result<Option<Deferred>, StoreError>> + Send {
        self.stores.deferred(&self.partition, key)
    }
}
