//! Commits too large for one logged batch, made atomic.
//!
//! A commit whose values pass [`CHUNK_BYTES`](crate::write::CHUNK_BYTES)
//! cannot be one logged batch, and several batches are not atomic. So its
//! state changes go through a transaction (a txn) of the partition:
//!
//! 1. `begin`: a row in `state_txns`, not committed;
//! 2. `stage`: the changes in `state_staged`, each with the fence
//!    timestamp it will be written with (any number of batches: staged
//!    rows are read by nothing but the resolution);
//! 3. the commit point: one logged batch of the rest of the commit
//!    (timers, deferral changes, dedup records) and the txn marked
//!    committed;
//! 4. `promote`: the staged changes written to `state_cells`, at their
//!    staged timestamps;
//! 5. `forget`: the txn and its staged rows deleted.
//!
//! Invariant: `state_cells` holds all of a txn's changes or none once its
//! partition's owner read it. A txn is resolved by its commit point: one
//! that has it is promoted, one that has not is forgotten. The owner
//! resolves its own unfinished txns (a commit that failed or was dropped
//! after `begin`) before it next reads the partition, and
//! `recovery_delay` after the failure if it reads nothing; a new owner
//! resolves every txn of the partition at `open`, before it handles
//! anything. Promoting again, or late, changes nothing newer: every write
//! carries its staged timestamp, below every later write of the partition.
//! Forgetting takes a newer timestamp than any write of the txn, so a
//! commit point or staged row that lands late stays deleted.

use crate::Inner;
use crate::error::Classify;
use crate::write::Writes;
use futures_util::TryStreamExt as _;
use prosody_core::broker::TopicPartition;
use prosody_core::store::{StateWrite, StoreError};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tracing::warn;

mod rows;
#[cfg(test)]
mod tests;

use rows::now_millis;
pub(crate) use rows::{Staged, TxnStatements};

/// The txns this client left unfinished, per partition: each resolved
/// before the partition's next read, or by a sweep.
#[derive(Debug, Default)]
pub(crate) struct Unresolved {
    /// How many there are in all: reads check it before taking the lock.
    count: AtomicUsize,
    txns: Mutex<HashMap<TopicPartition, BTreeSet<i64>>>,
}

impl Unresolved {
    fn lock(&self) -> MutexGuard<'_, HashMap<TopicPartition, BTreeSet<i64>>> {
        self.txns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, partition: &TopicPartition, txn: i64) {
        if self
            .lock()
            .entry(partition.clone())
            .or_default()
            .insert(txn)
        {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn remove(&self, partition: &TopicPartition, txn: i64) {
        let mut txns = self.lock();
        if let Some(set) = txns.get_mut(partition)
            && set.remove(&txn)
        {
            self.count.fetch_sub(1, Ordering::Relaxed);
            if set.is_empty() {
                txns.remove(partition);
            }
        }
    }

    fn of(&self, partition: &TopicPartition) -> Vec<i64> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        self.lock()
            .get(partition)
            .map(|set| set.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The partition went to another owner, who resolves them at `open`.
    pub(crate) fn close(&self, partition: &TopicPartition) {
        if let Some(set) = self.lock().remove(partition) {
            self.count.fetch_sub(set.len(), Ordering::Relaxed);
        }
    }
}

/// A txn in flight: dropped before [`Flight::done`] (failed, or dropped by
/// its attempt's deadline), it is left to be resolved.
struct Flight<'a> {
    inner: &'a Arc<Inner>,
    partition: &'a TopicPartition,
    txn: i64,
    done: bool,
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.inner.unresolved.add(self.partition, self.txn);
        let inner = Arc::clone(self.inner);
        let partition = self.partition.clone();
        // The sweep: if no read resolved it first.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(inner.recovery_delay).await;
                if let Err(error) = inner.resolve_unfinished(&partition).await {
                    warn!(%partition, %error, "resolving unfinished state txns failed; the next read tries again");
                }
            });
        }
    }
}

/// The steps of a txn, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Begin,
    Stage,
    CommitPoint,
    Promote,
    Forget,
}

type Part = (String, String, i32);

fn part(inner: &Inner, partition: &TopicPartition) -> Part {
    (
        inner.group.to_string(),
        partition.topic.to_string(),
        partition.partition,
    )
}

impl Inner {
    /// Commits `state` through a txn, with `rest` (the commit's other
    /// writes) at its commit point.
    pub(crate) async fn commit_staged(
        self: &Arc<Self>,
        partition: &TopicPartition,
        state: &[StateWrite],
        rest: Writes,
    ) -> Result<(), StoreError> {
        self.run_txn(partition, state, rest, Step::Forget)
            .await
            .map(drop)
    }

    /// Runs a txn's steps up to `last` (all but in tests, which stop
    /// early to crash there); returns the txn.
    async fn run_txn(
        self: &Arc<Self>,
        partition: &TopicPartition,
        state: &[StateWrite],
        rest: Writes,
        last: Step,
    ) -> Result<i64, StoreError> {
        let fence = self.fence(partition).await?;
        let txn = fence.next();
        let staged: Vec<Staged> = state.iter().map(|w| Staged::of(w, fence.next())).collect();
        let staged_at = now_millis();
        let mut flight = Flight {
            inner: self,
            partition,
            txn,
            done: false,
        };
        self.begin(partition, txn, staged_at, fence.next()).await?;
        if last > Step::Begin {
            self.stage(partition, txn, &staged, || fence.next()).await?;
        }
        if last > Step::Stage {
            self.commit_point(partition, txn, rest, fence.next())
                .await?;
        }
        if last > Step::CommitPoint {
            self.promote(partition, txn, staged_at, &staged).await?;
        }
        if last > Step::Promote {
            flight.done = true;
            self.forget_quietly(partition, txn).await;
        }
        Ok(txn)
    }

    async fn begin(
        &self,
        partition: &TopicPartition,
        txn: i64,
        staged_at: i64,
        ts: i64,
    ) -> Result<(), StoreError> {
        let (group, topic, part) = part(self, partition);
        let row = (group, topic, part, txn, staged_at, self.ttl, ts);
        self.session
            .execute_unpaged(&self.statements.txns.begin, row)
            .await
            .map(drop)
            .map_err(Classify::into_store)
    }

    async fn stage(
        &self,
        partition: &TopicPartition,
        txn: i64,
        staged: &[Staged],
        mut ts: impl FnMut() -> i64,
    ) -> Result<(), StoreError> {
        let mut writes = Writes::default();
        for (seq, s) in staged.iter().enumerate() {
            let (group, topic, part) = part(self, partition);
            let seq = i32::try_from(seq).unwrap_or(i32::MAX);
            let row = (
                group,
                topic,
                part,
                txn,
                seq,
                s.coll.clone(),
                s.key.clone(),
                s.op,
                s.item.clone(),
                s.value.clone(),
                s.ttl,
                s.ts,
                self.ttl,
                ts(),
            );
            writes.push(&self.statements.txns.stage, row);
        }
        writes.execute(&self.session).await
    }

    async fn commit_point(
        &self,
        partition: &TopicPartition,
        txn: i64,
        mut rest: Writes,
        ts: i64,
    ) -> Result<(), StoreError> {
        let (group, topic, part) = part(self, partition);
        rest.push(
            &self.statements.txns.commit,
            (self.ttl, ts, group, topic, part, txn),
        );
        rest.execute(&self.session).await
    }

    /// Writes a committed txn's changes to `state_cells`.
    async fn promote(
        &self,
        partition: &TopicPartition,
        txn: i64,
        staged_at: i64,
        staged: &[Staged],
    ) -> Result<(), StoreError> {
        let now = now_millis();
        let mut writes = Writes::default();
        for s in staged {
            let (write, ttl) = s.change(staged_at, now)?;
            self.push_state(partition, &write, ttl, s.ts, &mut writes);
        }
        writes.execute(&self.session).await.inspect_err(|error| {
            warn!(%partition, txn, %error, "promoting a committed state txn failed; it is resolved again");
        })
    }

    /// Deletes a txn and its staged rows, newer than all of its writes.
    async fn forget(&self, partition: &TopicPartition, txn: i64) -> Result<(), StoreError> {
        let ts = self.fence(partition).await?.next();
        let (group, topic, part) = part(self, partition);
        let mut writes = Writes::default();
        let row = (ts, group, topic, part, txn);
        writes.push(&self.statements.txns.forget_staged, row.clone());
        writes.push(&self.statements.txns.forget_txn, row);
        writes.execute(&self.session).await
    }

    /// Forgets a promoted txn; a failure leaves it to the next `open`,
    /// which promotes it again (changing nothing) and forgets it.
    async fn forget_quietly(&self, partition: &TopicPartition, txn: i64) {
        if let Err(error) = self.forget(partition, txn).await {
            warn!(%partition, txn, %error, "forgetting a promoted state txn failed; the next owner does");
        }
    }

    /// Resolves one txn: promoted if it reached its commit point, else
    /// forgotten.
    async fn resolve(&self, partition: &TopicPartition, txn: i64) -> Result<(), StoreError> {
        let (group, topic, part) = part(self, partition);
        let rows = self
            .session
            .execute_unpaged(
                &self.statements.txns.txn,
                (group.clone(), topic.clone(), part, txn),
            )
            .await
            .map_err(Classify::into_store)?
            .into_rows_result()
            .map_err(StoreError::rejected)?;
        let row = rows
            .maybe_first_row::<(Option<i64>, Option<bool>)>()
            .map_err(StoreError::rejected)?;
        if let Some((staged_at, Some(true))) = row {
            let staged: Vec<Staged> = self
                .session
                .execute_iter(
                    self.statements.txns.staged.clone(),
                    (group, topic, part, txn),
                )
                .await
                .map_err(Classify::into_store)?
                .rows_stream::<(String, String, i8, Vec<u8>, Vec<u8>, i32, i64)>()
                .map_err(Classify::into_store)?
                .map_ok(|(coll, key, op, item, value, ttl, ts)| Staged {
                    coll,
                    key,
                    op,
                    item,
                    value,
                    ttl,
                    ts,
                })
                .try_collect()
                .await
                .map_err(Classify::into_store)?;
            let staged_at = staged_at.unwrap_or_else(now_millis);
            self.promote(partition, txn, staged_at, &staged).await?;
            self.forget_quietly(partition, txn).await;
        } else {
            self.forget(partition, txn).await?;
        }
        Ok(())
    }

    /// Resolves the txns this client left unfinished on `partition`: before
    /// each read of it, so the owner never reads half a commit.
    pub(crate) async fn resolve_unfinished(
        &self,
        partition: &TopicPartition,
    ) -> Result<(), StoreError> {
        for txn in self.unresolved.of(partition) {
            self.resolve(partition, txn).await?;
            self.unresolved.remove(partition, txn);
        }
        Ok(())
    }

    /// Resolves every txn of `partition`: at `open`, before the new owner
    /// handles anything.
    pub(crate) async fn resolve_all(&self, partition: &TopicPartition) -> Result<(), StoreError> {
        let txns: Vec<(i64,)> = self
            .session
            .execute_iter(self.statements.txns.txns.clone(), part(self, partition))
            .await
            .map_err(Classify::into_store)?
            .rows_stream::<(i64,)>()
            .map_err(Classify::into_store)?
            .try_collect()
            .await
            .map_err(Classify::into_store)?;
        for (txn,) in txns {
            self.resolve(partition, txn).await?;
            self.unresolved.remove(partition, txn);
        }
        Ok(())
    }
}
