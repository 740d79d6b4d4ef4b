//! The defer store's tables: per key, the deferred offsets in order with
//! the head's failure count as a static column (`deferred`), per
//! partition the keys that have any (`deferred_keys`), and per partition
//! how many keys and records are deferred (`deferred_counts`).
//!
//! The counts row holds absolute values, not Cassandra counters: a counter
//! update cannot share a logged batch with the queue rows, and is not
//! idempotent, so a commit written again (every commit may be) would count
//! twice. Instead the owner reads the row when it opens the partition
//! (`crate::known`), adds each commit's changes to what it holds in
//! memory, and writes the result in the commit's own batch, with a
//! timestamp taken as it counts, so the last count planned is the one
//! that stays and a batch written again writes the same value.
//!
//! Failure behaviour: a commit whose outcome is unknown (failed or
//! dropped after its deferral changes were counted) counts its keys as
//! its writes would leave them until they are read again (the retried
//! commit reads them), then as read. An evicted old owner's late write is
//! fenced below the new owner's timestamps, so it cannot overwrite the new
//! owner's row, but what it adds to the queues is not counted. These, an
//! unknown outcome still open when the partition moves, and offsets
//! expiring by TTL, make the drift the `DeferStore` contract bounds: it
//! ends when the partition's deferrals drain. A keyspace from before the
//! row (schema version 9) has none: each open counts the queues until a
//! commit of a deferral change writes the row.

use crate::Inner;
use crate::error::Classify;
use crate::known::{Knowledge, length};
use crate::write::Writes;
use futures_util::TryStreamExt as _;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::defer::{DeferCounts, Deferral, Deferred};
use prosody_contracts::store::{DeferWrite, StoreError};

/// The queue after deferring `offset`.
fn defer(state: Option<Deferred>, offset: i64, deferral: Deferral) -> Deferred {
    let mut state = state.unwrap_or(Deferred {
        offsets: Vec::new(),
        failures: 0,
    });
    if let Err(at) = state.offsets.binary_search(&offset) {
        state.offsets.insert(at, offset);
        if at == 0 {
            state.failures = deferral.failures();
        }
    }
    state
}

/// The queue after completing `offset`: removed if it is the head.
fn complete(state: Option<Deferred>, offset: i64) -> Option<Deferred> {
    let mut state = state?;
    if state.head() == Some(offset) {
        state.offsets.remove(0);
        state.failures = 0;
    }
    (!state.offsets.is_empty()).then_some(state)
}

/// The queue after one more failure of its head.
fn failed(state: Option<Deferred>) -> Option<Deferred> {
    state.map(|mut state| {
        state.failures = state.failures.saturating_add(1);
        state
    })
}

fn key_of(write: &DeferWrite) -> &Key {
    match write {
        DeferWrite::Defer { key, .. }
        | DeferWrite::Complete { key, .. }
        | DeferWrite::Failed { key } => key,
    }
}

/// A key's deferral state before and after a commit.
pub(crate) struct Change {
    key: Key,
    epoch: Option<u64>,
    pub(crate) after: Option<Deferred>,
}

/// A row of `deferred_counts`: keys and records.
type CountRow = (Option<i64>, Option<i64>);

fn count(value: Option<i64>) -> u64 {
    value
        .and_then(|value| u64::try_from(value).ok())
        .unwrap_or(0)
}

fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl Inner {
    /// The key's queue: known, cached, or read.
    pub(crate) async fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        Ok(self.state(partition, key).await?.1)
    }

    async fn state(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<(Option<u64>, Option<Deferred>), StoreError> {
        let epoch = match self.known.known(partition, key) {
            Some((epoch, Knowledge::Known(state))) => return Ok((Some(epoch), state)),
            Some((epoch, Knowledge::Unknown)) => Some(epoch),
            None => None,
        };
        let state = self.read_deferred(partition, key).await?;
        if let Some(epoch) = epoch {
            self.known.record(partition, epoch, key, state.as_ref());
        }
        Ok((epoch, state))
    }

    async fn read_deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        let values = (
            self.group.to_string(),
            partition.topic.to_string(),
            partition.partition,
            key.to_string(),
        );
        let rows: Vec<(Option<i64>, Option<i32>)> = self
            .session
            .execute_iter(self.statements.select_deferred.clone(), values)
            .await
            .map_err(Classify::into_store)?
            .rows_stream::<(Option<i64>, Option<i32>)>()
            .map_err(Classify::into_store)?
            .try_collect()
            .await
            .map_err(Classify::into_store)?;
        let failures = rows.iter().find_map(|(_, failures)| *failures).unwrap_or(0);
        let offsets: Vec<i64> = rows.iter().filter_map(|(offset, _)| *offset).collect();
        Ok((!offsets.is_empty()).then(|| Deferred {
            offsets,
            failures: u32::try_from(failures).unwrap_or(0),
        }))
    }

    /// Every key of the partition with deferred offsets.
    pub(crate) async fn deferred_keys(
        &self,
        partition: &TopicPartition,
    ) -> Result<Vec<Key>, StoreError> {
        let values = (
            self.group.to_string(),
            partition.topic.to_string(),
            partition.partition,
        );
        self.session
            .execute_iter(self.statements.select_deferred_keys.clone(), values)
            .await
            .map_err(Classify::into_store)?
            .rows_stream::<(String,)>()
            .map_err(Classify::into_store)?
            .map_ok(|(key,)| Key::from(key))
            .try_collect()
            .await
            .map_err(Classify::into_store)
    }

    /// The partition's counts row; `None` where none was written.
    async fn read_counts(
        &self,
        partition: &TopicPartition,
    ) -> Result<Option<DeferCounts>, StoreError> {
        let values = (
            self.group.to_string(),
            partition.topic.to_string(),
            partition.partition,
        );
        let rows: Vec<CountRow> = self
            .session
            .execute_iter(self.statements.select_deferred_counts.clone(), values)
            .await
            .map_err(Classify::into_store)?
            .rows_stream::<CountRow>()
            .map_err(Classify::into_store)?
            .try_collect()
            .await
            .map_err(Classify::into_store)?;
        Ok(rows.into_iter().next().map(|(keys, records)| DeferCounts {
            keys: count(keys),
            records: count(records),
        }))
    }

    /// The partition's counts: what the owner holds, or else the row.
    pub(crate) async fn counts(
        &self,
        partition: &TopicPartition,
    ) -> Result<DeferCounts, StoreError> {
        if let Some(counts) = self.known.counts(partition) {
            return Ok(counts);
        }
        Ok(self.read_counts(partition).await?.unwrap_or_default())
    }

    /// Loads what the owner of a partition knows of its deferrals: the
    /// keys from the index, the records from the counts row. The keys are
    /// counted from the index; where the row is missing or cannot be right
    /// (fewer records than keys), the queues are counted once.
    pub(crate) async fn open_deferrals(
        &self,
        partition: &TopicPartition,
    ) -> Result<(), StoreError> {
        let keys = self.deferred_keys(partition).await?;
        let stored = self.read_counts(partition).await?;
        let indexed = u64::try_from(keys.len()).unwrap_or(u64::MAX);
        let counts = match stored {
            Some(counts) if counts.records >= indexed && (indexed > 0 || counts.records == 0) => {
                DeferCounts {
                    keys: indexed,
                    records: counts.records,
                }
            }
            None if keys.is_empty() => DeferCounts::default(),
            _ => {
                let mut counts = DeferCounts::default();
                for key in &keys {
                    let state = self.read_deferred(partition, key).await?;
                    counts = counts.changed(0, length(state.as_ref()));
                }
                counts
            }
        };
        self.known.open(partition, keys, counts);
        Ok(())
    }

    /// The statements of a batch's deferral changes: per key, its state
    /// read (or known), the changes applied in order, and the difference
    /// written.
    pub(crate) async fn deferral_writes(
        &self,
        partition: &TopicPartition,
        changes: &[DeferWrite],
        writes: &mut Writes,
    ) -> Result<Vec<Change>, StoreError> {
        let mut keys: Vec<&Key> = Vec::new();
        for write in changes {
            if !keys.contains(&key_of(write)) {
                keys.push(key_of(write));
            }
        }
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let fence = self.fence(partition).await?;
        let mut planned = Vec::with_capacity(keys.len());
        for key in keys {
            let (epoch, before) = self.state(partition, key).await?;
            let mut after = before.clone();
            for write in changes.iter().filter(|write| key_of(write) == key) {
                after = match *write {
                    DeferWrite::Defer {
                        offset, deferral, ..
                    } => Some(defer(after, offset, deferral)),
                    DeferWrite::Complete { offset, .. } => complete(after, offset),
                    DeferWrite::Failed { .. } => failed(after),
                };
            }
            let timestamp = fence.next();
            self.difference(
                partition,
                key,
                (before.as_ref(), after.as_ref()),
                timestamp,
                writes,
            );
            planned.push((
                before,
                Change {
                    key: key.clone(),
                    epoch,
                    after,
                },
            ));
        }
        let epoch = planned.iter().find_map(|(_, change)| change.epoch);
        let lengths = planned
            .iter()
            .map(|(before, change)| (length(before.as_ref()), length(change.after.as_ref())));
        if let Some((counts, timestamp)) =
            epoch.and_then(|epoch| self.known.plan(partition, epoch, lengths, || fence.next()))
        {
            writes.push(
                &self.statements.set_deferred_counts,
                (
                    self.ttl,
                    timestamp,
                    signed(counts.keys),
                    signed(counts.records),
                    self.group.to_string(),
                    partition.topic.to_string(),
                    partition.partition,
                ),
            );
        }
        Ok(planned.into_iter().map(|(_, change)| change).collect())
    }

    fn difference(
        &self,
        partition: &TopicPartition,
        key: &Key,
        (before, after): (Option<&Deferred>, Option<&Deferred>),
        timestamp: i64,
        writes: &mut Writes,
    ) {
        let ttl = self.ttl;
        let row = || {
            (
                self.group.to_string(),
                partition.topic.to_string(),
                partition.partition,
                key.to_string(),
            )
        };
        let Some(after) = after else {
            if before.is_some() {
                let (g, t, p, k) = row();
                writes.push(
                    &self.statements.delete_deferred_key,
                    (timestamp, g, t, p, k),
                );
                let (g, t, p, k) = row();
                writes.push(
                    &self.statements.delete_deferred_index,
                    (timestamp, g, t, p, k),
                );
            }
            return;
        };
        let old: &[i64] = before.map_or(&[], |before| &before.offsets);
        for &offset in after.offsets.iter().filter(|offset| !old.contains(offset)) {
            let (g, t, p, k) = row();
            writes.push(
                &self.statements.insert_deferred,
                (g, t, p, k, offset, ttl, timestamp),
            );
        }
        for &offset in old.iter().filter(|offset| !after.offsets.contains(offset)) {
            let (g, t, p, k) = row();
            writes.push(
                &self.statements.delete_deferred,
                (timestamp, g, t, p, k, offset),
            );
        }
        if before.is_none_or(|before| before.failures != after.failures) {
            let failures = i32::try_from(after.failures).unwrap_or(i32::MAX);
            let (g, t, p, k) = row();
            writes.push(
                &self.statements.set_failures,
                (ttl, timestamp, failures, g, t, p, k),
            );
        }
        // Every change that leaves offsets writes the index row again, so
        // it stays whatever earlier write (one whose outcome was unknown)
        // lands late; and its TTL follows the newest offset's.
        let (g, t, p, k) = row();
        writes.push(
            &self.statements.insert_deferred_index,
            (g, t, p, k, ttl, timestamp),
        );
    }

    /// After the commit: what it wrote is known, or, if its outcome is
    /// unknown, its keys are unsure.
    pub(crate) fn settle_deferrals(
        &self,
        partition: &TopicPartition,
        changes: &[Change],
        landed: bool,
    ) {
        for change in changes {
            let Some(epoch) = change.epoch else { continue };
            if landed {
                self.known
                    .record(partition, epoch, &change.key, change.after.as_ref());
            } else {
                let counted = length(change.after.as_ref());
                self.known.unsure(partition, epoch, &change.key, counted);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{complete, defer, failed};
    use prosody_contracts::store::defer::{Deferral, Deferred};

    #[allow(
        clippy::unnecessary_wraps,
        reason = "the states under test are options"
    )]
    fn queue(offsets: &[i64], failures: u32) -> Option<Deferred> {
        Some(Deferred {
            offsets: offsets.to_vec(),
            failures,
        })
    }

    #[test]
    fn transitions_follow_the_contract() {
        let deferred = |state, offset, deferral| Some(defer(state, offset, deferral));
        assert_eq!(deferred(None, 5, Deferral::AfterFailure), queue(&[5], 1));
        assert_eq!(
            deferred(queue(&[5], 1), 7, Deferral::Behind),
            queue(&[5, 7], 1)
        );
        // In front of the head: a new head with its own count.
        assert_eq!(
            deferred(queue(&[5], 3), 2, Deferral::Behind),
            queue(&[2, 5], 0)
        );
        // Already queued: nothing changes.
        assert_eq!(
            deferred(queue(&[5], 3), 5, Deferral::Behind),
            queue(&[5], 3)
        );
        assert_eq!(complete(queue(&[5, 7], 2), 5), queue(&[7], 0));
        assert_eq!(complete(queue(&[5, 7], 2), 7), queue(&[5, 7], 2));
        assert_eq!(complete(queue(&[5], 2), 5), None);
        assert_eq!(complete(None, 5), None);
        assert_eq!(failed(queue(&[5], 2)), queue(&[5], 3));
        assert_eq!(failed(None), None);
    }
}
