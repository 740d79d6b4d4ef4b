//! One partition's timer access: the store, and notices to the partition
//! task so what it holds in memory follows what handlers change.

use super::{Due, TimerAccess, TimerFuture, TimerOp};
use crate::broker::TopicPartition;
use crate::clock::Timestamp;
use crate::key::Key;
use crate::store::timer::{TimerEntry, TimerKind, TimerStore, to_seconds};
use tokio::sync::mpsc;

/// A change the partition task applies to its due queue.
#[derive(Debug)]
pub(crate) enum Notice {
    Scheduled(Due),
    Unscheduled(Key, i64, TimerKind),
    Cleared(Key, TimerKind),
}

/// The timers of one partition, for its handlers' contexts.
///
/// Invariant: a change reaches the store before its notice is sent, so the
/// partition task never holds a timer the store does not (a notice that
/// arrives after a reload of the same timer is harmless: inserts are
/// idempotent).
pub(crate) struct PartitionTimers<T> {
    pub(crate) store: T,
    pub(crate) partition: TopicPartition,
    pub(crate) notices: mpsc::UnboundedSender<Notice>,
}

impl<T: TimerStore> PartitionTimers<T> {
    async fn write(
        &self,
        key: &Key,
        kind: TimerKind,
        ops: Vec<TimerOp>,
    ) -> Result<(), crate::store::StoreError> {
        for op in ops {
            let notice = match op {
                TimerOp::Schedule(time, trace) => {
                    let mut entry = TimerEntry::new(key.clone(), time).with_kind(kind);
                    entry.trace.clone_from(&trace);
                    self.store.schedule(&self.partition, entry).await?;
                    let mut due = Due::new(to_seconds(time), key.clone(), kind);
                    due.trace = trace;
                    Notice::Scheduled(due)
                }
                TimerOp::Unschedule(time) => {
                    self.store
                        .unschedule(&self.partition, key, kind, time)
                        .await?;
                    Notice::Unscheduled(key.clone(), to_seconds(time), kind)
                }
                TimerOp::Clear => {
                    self.store.clear(&self.partition, key, kind).await?;
                    Notice::Cleared(key.clone(), kind)
                }
            };
            // The partition task is gone after a revocation: its next owner
            // loads the store.
            let _ = self.notices.send(notice);
        }
        Ok(())
    }
}

impl<T: TimerStore> TimerAccess for PartitionTimers<T> {
    fn scheduled<'a>(&'a self, key: &'a Key, kind: TimerKind) -> TimerFuture<'a, Vec<Timestamp>> {
        Box::pin(self.store.scheduled(&self.partition, key, kind))
    }

    fn apply<'a>(
        &'a self,
        key: &'a Key,
        kind: TimerKind,
        ops: Vec<TimerOp>,
    ) -> TimerFuture<'a, ()> {
        Box::pin(self.write(key, kind, ops))
    }

    fn fired<'a>(&'a self, key: &'a Key, kind: TimerKind, time: Timestamp) -> TimerFuture<'a, ()> {
        Box::pin(self.store.unschedule(&self.partition, key, kind, time))
    }

    fn load(&self, from: Timestamp, until: Timestamp) -> TimerFuture<'_, Vec<Due>> {
        Box::pin(async move {
            let entries = self.store.load(&self.partition, from, until).await?;
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
