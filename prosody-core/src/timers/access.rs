//! One partition's store access: its stores, and notices to the partition
//! task so what it holds in memory follows what handlers change.

use super::{Due, StoreAccess, StoreFuture};
use crate::broker::TopicPartition;
use crate::clock::Timestamp;
use crate::defer::Tally;
use crate::key::Key;
use crate::store::timer::{TimerKind, to_seconds};
use crate::store::{
    Batch, DedupKey, Deferred, Direction, ItemRange, StoreError, Stores, TimerChange,
};
use bytes::Bytes;
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

/// The stores of one partition, for its handlers' contexts and its stages.
///
/// Invariant: a batch reaches the stores before the notices of its timer
/// changes are sent, so the partition task never holds a timer the store
/// does not (a notice that arrives after a reload of the same timer is
/// harmless: inserts are idempotent). A batch with timer changes that
/// fails, or is dropped before it returns, may have landed in part, so it
/// sends [`Notice::Resync`] instead: the task reads the store again rather
/// than guess.
pub(crate) struct PartitionStores<S> {
    pub(crate) stores: S,
    pub(crate) partition: TopicPartition,
    pub(crate) notices: mpsc::UnboundedSender<Notice>,
    /// The partition's deferred keys and records: read at open, then
    /// after each commit that changes deferrals.
    pub(crate) deferred: Arc<Tally>,
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

impl<S: Stores> PartitionStores<S> {
    /// Takes the partition, then reads its deferred counts (a failed read
    /// is logged: the gauges report none until a commit tells).
    async fn open(&self) -> Result<(), StoreError> {
        self.stores.open(&self.partition).await?;
        self.count().await;
        Ok(())
    }

    /// Reads the partition's deferred counts: at once where the stores
    /// can, else with a read.
    async fn count(&self) {
        if self
            .deferred
            .refresh(|| self.stores.counts_now(&self.partition))
        {
            return;
        }
        match self.stores.counts(&self.partition).await {
            Ok(counts) => self.deferred.set(counts),
            Err(error) => {
                debug!(partition = %self.partition, %error, "reading the deferred counts failed");
            }
        }
    }

    async fn write(&self, batch: Batch) -> Result<(), crate::store::StoreError> {
        if batch.is_empty() {
            return Ok(());
        }
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
            notices: &self.notices,
            armed: !notices.is_empty(),
        };
        self.stores.commit(&self.partition, batch).await?;
        unsure.armed = false;
        for notice in notices {
            // The partition task is gone after a revocation: its next owner
            // loads the store.
            let _ = self.notices.send(notice);
        }
        if deferrals {
            self.count().await;
        }
        Ok(())
    }
}

impl<S: Stores> StoreAccess for PartitionStores<S> {
    fn scheduled<'a>(&'a self, key: &'a Key, kind: TimerKind) -> StoreFuture<'a, Vec<Timestamp>> {
        Box::pin(self.stores.scheduled(&self.partition, key, kind))
    }

    fn commit(&self, batch: Batch) -> StoreFuture<'_, ()> {
        Box::pin(self.write(batch))
    }

    /// A batch of dedup records and deferral changes only: it sends no
    /// notice and writes no state cell, so the stores may write it at
    /// once. Any other goes through [`write`](Self::write).
    fn commit_now(&self, batch: Batch) -> Result<Result<(), StoreError>, Batch> {
        if batch.is_empty() {
            return Ok(Ok(()));
        }
        if !batch.timers.is_empty() || !batch.state.is_empty() {
            return Err(batch);
        }
        if batch.deferrals.is_empty() {
            return self.stores.commit_now(&self.partition, batch);
        }
        let written = self.stores.commit_now(&self.partition, batch)?;
        if written.is_ok() {
            // A store that writes at once counts at once; one that cannot
            // is read again at the next commit through `write`.
            self.deferred
                .refresh(|| self.stores.counts_now(&self.partition));
        }
        Ok(written)
    }

    fn cell<'a>(
        &'a self,
        collection: &'a str,
        key: &'a Key,
        item: &'a [u8],
    ) -> StoreFuture<'a, Option<Bytes>> {
        Box::pin(self.stores.cell(&self.partition, collection, key, item))
    }

    fn cells<'a>(
        &'a self,
        collection: &'a str,
        key: &'a Key,
        range: &'a ItemRange,
        direction: Direction,
        limit: usize,
    ) -> StoreFuture<'a, Vec<(Bytes, Bytes)>> {
        Box::pin(
            self.stores
                .cells(&self.partition, collection, key, range, direction, limit),
        )
    }

    fn contains(&self, key: DedupKey) -> StoreFuture<'_, bool> {
        Box::pin(self.stores.contains(key))
    }

    fn contains_now(&self, key: DedupKey) -> Option<bool> {
        self.stores.contains_now(key)
    }

    fn peek(&self, key: &Key) -> Option<bool> {
        self.stores.peek(&self.partition, key)
    }

    fn deferred<'a>(&'a self, key: &'a Key) -> StoreFuture<'a, Option<Deferred>> {
        Box::pin(self.stores.deferred(&self.partition, key))
    }

    fn open(&self) -> StoreFuture<'_, ()> {
        Box::pin(PartitionStores::open(self))
    }

    fn close(&self) {
        self.stores.close(&self.partition);
    }

    fn load(&self, from: Timestamp, until: Timestamp) -> StoreFuture<'_, Vec<Due>> {
        Box::pin(async move {
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
        })
    }
}
