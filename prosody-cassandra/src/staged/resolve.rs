//! Resolving txns. One that reached its commit point is promoted. One
//! that did not is undecided while its commit point may still land (a
//! logged batch that timed out can still be applied, from Cassandra's
//! batch log): for `recovery_delay` after it was staged. After that it is
//! forgotten. Reads of the keys an undecided txn changes wait for it.

use super::rows::now_millis;
use super::{Staged, part};
use crate::Inner;
use crate::error::Classify;
use futures_util::TryStreamExt as _;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::StoreError;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;

/// What became of a txn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Promoted, or forgotten: nothing of it is pending.
    Resolved,
    /// Its commit point may still land.
    Undecided,
}

/// How many times a sweep looks again at txns still undecided (a clock
/// behind the one that staged them) before it leaves them to reads.
const SWEEPS: usize = 8;

impl Inner {
    /// Resolves one txn, if it can be decided.
    pub(super) async fn resolve(
        &self,
        partition: &TopicPartition,
        txn: i64,
    ) -> Result<Outcome, StoreError> {
        let (group, topic, part) = part(self, partition);
        let rows = self
            .session
            .execute_unpaged(&self.statements.txns.txn, (group, topic, part, txn))
            .await
            .map_err(Classify::into_store)?
            .into_rows_result()
            .map_err(StoreError::rejected)?;
        let row = rows
            .maybe_first_row::<(Option<i64>, Option<bool>, Option<i32>)>()
            .map_err(StoreError::rejected)?;
        let delay = i64::try_from(self.recovery_delay.as_millis()).unwrap_or(i64::MAX);
        match row {
            Some((staged_at, Some(true), rows)) => {
                let staged = self.staged(partition, txn).await?;
                let expected = usize::try_from(rows.unwrap_or(0)).unwrap_or(0);
                if staged.len() < expected {
                    // A replica behind (another datacenter's, say): never
                    // promote part of a txn.
                    return Err(StoreError::unavailable(format!(
                        "{} of the {expected} staged changes of a committed state txn on \
                         {partition} are visible yet",
                        staged.len()
                    )));
                }
                let staged_at = staged_at.unwrap_or_else(now_millis);
                self.promote(partition, txn, staged_at, &staged).await?;
                self.forget_quietly(partition, txn).await;
                Ok(Outcome::Resolved)
            }
            Some((Some(staged_at), _, _)) if now_millis().saturating_sub(staged_at) < delay => {
                Ok(Outcome::Undecided)
            }
            _ => {
                self.forget(partition, txn).await?;
                Ok(Outcome::Resolved)
            }
        }
    }

    async fn staged(
        &self,
        partition: &TopicPartition,
        txn: i64,
    ) -> Result<Vec<Staged>, StoreError> {
        let (group, topic, part) = part(self, partition);
        self.session
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
            .map_err(Classify::into_store)
    }

    /// Before a read of `key`: resolves the undecided txns that change
    /// it, so the owner never reads half a commit.
    ///
    /// # Errors
    ///
    /// A retriable error while one of them cannot be decided yet.
    pub(crate) async fn resolve_key(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<(), StoreError> {
        for txn in self.unresolved.touching(partition, Some(key)) {
            match self.resolve(partition, txn).await? {
                Outcome::Resolved => self.unresolved.remove(partition, txn),
                Outcome::Undecided => {
                    return Err(StoreError::unavailable(format!(
                        "a commit of key {key} on {partition} larger than one batch is not \
                         decided yet: its commit point may land for state_recovery_delay ({:?}) \
                         after it was staged",
                        self.recovery_delay
                    )));
                }
            }
        }
        Ok(())
    }

    /// Resolves the partition's undecided txns; whether none is left.
    async fn resolve_known(&self, partition: &TopicPartition) -> Result<bool, StoreError> {
        let mut decided = true;
        for txn in self.unresolved.touching(partition, None) {
            match self.resolve(partition, txn).await? {
                Outcome::Resolved => self.unresolved.remove(partition, txn),
                Outcome::Undecided => decided = false,
            }
        }
        Ok(decided)
    }

    /// At `open`, before the new owner handles anything: resolves every
    /// txn of the partition; the undecided ones are kept, with their keys,
    /// for reads to wait on and a sweep to resolve.
    pub(crate) async fn resolve_all(
        self: &Arc<Self>,
        partition: &TopicPartition,
    ) -> Result<(), StoreError> {
        self.unresolved.open(partition);
        let txns: Vec<(i64, Option<BTreeSet<String>>)> = self
            .session
            .execute_iter(self.statements.txns.txns.clone(), part(self, partition))
            .await
            .map_err(Classify::into_store)?
            .rows_stream::<(i64, Option<BTreeSet<String>>)>()
            .map_err(Classify::into_store)?
            .try_collect()
            .await
            .map_err(Classify::into_store)?;
        let mut undecided = false;
        for (txn, keys) in txns {
            if self.resolve(partition, txn).await? == Outcome::Undecided {
                self.unresolved
                    .add(partition, txn, keys.unwrap_or_default());
                undecided = true;
            }
        }
        if undecided {
            self.sweep_later(partition.clone());
        }
        Ok(())
    }

    /// The sweep: `recovery_delay` from now, resolves the partition's
    /// undecided txns, looking again each second while some are left.
    pub(super) fn sweep_later(self: &Arc<Self>, partition: TopicPartition) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = Arc::clone(self);
        runtime.spawn(async move {
            let mut wait = inner.recovery_delay;
            for _ in 0..SWEEPS {
                tokio::time::sleep(wait).await;
                match inner.resolve_known(&partition).await {
                    Ok(true) => return,
                    Ok(false) => wait = Duration::from_secs(1),
                    Err(error) => {
                        warn!(%partition, %error, "the sweep of undecided state txns failed; reads of their keys resolve them");
                        return;
                    }
                }
            }
        });
    }
}
