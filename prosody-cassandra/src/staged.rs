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
//! 4. `promote`: the staged changes written to `state_items`, at their
//!    staged timestamps;
//! 5. `forget`: the txn and its staged rows deleted.
//!
//! Invariant: a read of a key never sees part of a txn that changes it.
//! A txn that reached its commit point is promoted before its keys are
//! read. One that did not is undecided while its commit point may still
//! land (a timed-out logged batch can be applied later, from Cassandra's
//! batch log): for `recovery_delay` after it was staged, reads of its
//! keys fail as retriable; after that it is forgotten. The owner tracks
//! its own unfinished txns (a commit that failed or was dropped after
//! `begin`), and a sweep resolves them `recovery_delay` later; a new owner
//! resolves every txn of the partition at `open`, before it handles
//! anything, keeping the undecided ones (the txn row lists their keys).
//! Promoting again, or late, changes nothing newer: every write carries
//! its staged timestamp, below every later write of the partition.
//! Forgetting takes a newer timestamp than any write of the txn, so a
//! commit point or staged row that lands later stays deleted.

use crate::Inner;
use crate::error::Classify;
use crate::write::Writes;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::store::{StateWrite, StoreError};
use std::collections::BTreeSet;
use std::sync::Arc;
use tracing::warn;

mod pending;
mod resolve;
mod rows;
#[cfg(test)]
mod tests;

pub(crate) use pending::Unresolved;

use rows::now_millis;
pub(crate) use rows::{Staged, TxnStatements};

/// A txn in flight: dropped before [`Flight::done`] (failed, or dropped by
/// its attempt's deadline), it is left undecided: reads of its keys wait
/// for it, and a sweep resolves it once it can be decided.
struct Flight<'a> {
    inner: &'a Arc<Inner>,
    partition: &'a TopicPartition,
    txn: i64,
    keys: BTreeSet<String>,
    done: bool,
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let keys = std::mem::take(&mut self.keys);
        self.inner.unresolved.add(self.partition, self.txn, keys);
        self.inner.sweep_later(self.partition.clone());
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
            keys: state.iter().map(|write| write.key.to_string()).collect(),
            done: false,
        };
        let rows = i32::try_from(staged.len()).unwrap_or(i32::MAX);
        let keys = flight.keys.clone();
        self.begin(partition, txn, (staged_at, rows, keys), fence.next())
            .await?;
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

    /// Records the txn: when it was staged, how many changes it has, and
    /// the keys they change.
    async fn begin(
        &self,
        partition: &TopicPartition,
        txn: i64,
        (staged_at, rows, keys): (i64, i32, BTreeSet<String>),
        ts: i64,
    ) -> Result<(), StoreError> {
        let (group, topic, part) = part(self, partition);
        let row = (group, topic, part, txn, staged_at, rows, keys, self.ttl, ts);
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

    /// Writes a committed txn's changes to `state_items`; refused once the
    /// partition was closed (its next owner does it).
    async fn promote(
        &self,
        partition: &TopicPartition,
        txn: i64,
        staged_at: i64,
        staged: &[Staged],
    ) -> Result<(), StoreError> {
        self.fence(partition).await?;
        let now = now_millis();
        let (mut changes, mut ttls) = (Vec::new(), Vec::new());
        for s in staged {
            let (write, ttl) = s.change(staged_at, now)?;
            changes.push(write);
            ttls.push((ttl, s.ts));
        }
        let mut cleared = self.cleared(partition, &changes).await?;
        let mut writes = Writes::default();
        for (write, (ttl, ts)) in changes.iter().zip(ttls) {
            self.push_state(partition, write, ttl, ts, &mut cleared, &mut writes);
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
}
