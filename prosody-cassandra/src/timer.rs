//! The timer store's tables: each timer in its slab (`timer_slabs`, by
//! partition and slab, ordered by time), the slabs in use
//! (`timer_slab_index`), and each key's times (`timer_keys`). A load reads
//! the index, then only the slabs the range touches; `scheduled` and a
//! clear read one partition of `timer_keys`.

use crate::Inner;
use crate::error::{Classify, Corrupt};
use crate::write::Writes;
use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::clock::{self, Timestamp};
use prosody_contracts::key::Key;
use prosody_contracts::store::timer::{TimerEntry, TimerKind, from_seconds, to_seconds};
use prosody_contracts::store::{StoreError, TimerChange, TimerWrite};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use tracing::debug;

/// Slabs read at once by a load.
const CONCURRENT_SLABS: usize = 16;

/// The stored code of a kind.
pub(crate) fn kind_code(kind: TimerKind) -> Result<i8, StoreError> {
    match kind {
        TimerKind::Application => Ok(0),
        TimerKind::Defer => Ok(1),
        other => Err(Corrupt::store("timer kind", format!("{other:?}"))),
    }
}

fn kind_of(code: i8) -> Result<TimerKind, StoreError> {
    match code {
        0 => Ok(TimerKind::Application),
        1 => Ok(TimerKind::Defer),
        other => Err(Corrupt::store("timer kind code", other)),
    }
}

/// A partition's columns, owned, for a statement's values.
fn part(inner: &Inner, partition: &TopicPartition) -> (String, String, i32) {
    (
        inner.group.to_string(),
        partition.topic.to_string(),
        partition.partition,
    )
}

impl Inner {
    /// The key's stored times of `kind`, ascending (the clustering order).
    pub(crate) async fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> Result<Vec<Timestamp>, StoreError> {
        Ok(self
            .stored_seconds(partition, key, kind)
            .await?
            .into_iter()
            .map(from_seconds)
            .collect())
    }

    async fn stored_seconds(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> Result<Vec<i64>, StoreError> {
        let (group, topic, part) = part(self, partition);
        let values = (group, topic, part, key.to_string(), kind_code(kind)?);
        self.session
            .execute_iter(self.statements.select_timer_key.clone(), values)
            .await
            .map_err(Classify::into_store)?
            .rows_stream::<(i64,)>()
            .map_err(Classify::into_store)?
            .map_ok(|(at,)| at)
            .try_collect()
            .await
            .map_err(Classify::into_store)
    }

    /// The partition's timers with `from <= time < until`, ordered by
    /// (time, key, kind): the slabs in use within the range, each read for
    /// the range's seconds.
    pub(crate) async fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> Result<Vec<TimerEntry>, StoreError> {
        let Some(range) = self.slab_size.slabs(from, until) else {
            return Ok(Vec::new());
        };
        let (from, until) = (to_seconds(from), to_seconds(until));
        let slabs = self.slabs(partition, *range.start(), *range.end()).await?;
        let mut entries: Vec<TimerEntry> = stream::iter(slabs)
            .map(|slab| self.slab(partition, slab, from, until))
            .buffer_unordered(CONCURRENT_SLABS)
            .try_concat()
            .await?;
        entries.sort_by(|a, b| (a.time, &a.key, a.kind).cmp(&(b.time, &b.key, b.kind)));
        Ok(entries)
    }

    /// The slabs in use from `first` to `last`, ascending.
    async fn slabs(
        &self,
        partition: &TopicPartition,
        first: i64,
        last: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let (group, topic, part) = part(self, partition);
        self.session
            .execute_iter(
                self.statements.select_slab_index.clone(),
                (group, topic, part, first, last),
            )
            .await
            .map_err(Classify::into_store)?
            .rows_stream::<(i64,)>()
            .map_err(Classify::into_store)?
            .map_ok(|(slab,)| slab)
            .try_collect()
            .await
            .map_err(Classify::into_store)
    }

    async fn slab(
        &self,
        partition: &TopicPartition,
        slab: i64,
        from: i64,
        until: i64,
    ) -> Result<Vec<TimerEntry>, StoreError> {
        let (group, topic, part) = part(self, partition);
        let rows: Vec<(i64, String, i8, Option<String>)> = self
            .session
            .execute_iter(
                self.statements.select_slab.clone(),
                (group, topic, part, slab, from, until),
            )
            .await
            .map_err(Classify::into_store)?
            .rows_stream::<(i64, String, i8, Option<String>)>()
            .map_err(Classify::into_store)?
            .try_collect()
            .await
            .map_err(Classify::into_store)?;
        rows.into_iter()
            .map(|(at, key, kind, trace)| {
                let mut entry =
                    TimerEntry::new(Key::from(key), from_seconds(at)).with_kind(kind_of(kind)?);
                entry.trace = trace.map(Arc::from);
                Ok(entry)
            })
            .collect()
    }

    /// Removes from the slab index the slabs that ended two slabs ago or
    /// earlier and hold no timer, so loads from the distant past read only
    /// slabs in use. Called when this member takes the partition, before
    /// any of its handlers runs, so no write of this member races the
    /// removal; a slab's index row written later (a timer scheduled into
    /// the past) carries a later timestamp and survives.
    pub(crate) async fn prune_slabs(&self, partition: &TopicPartition) -> Result<(), StoreError> {
        let removal = self.fence(partition).await?.next();
        let now = to_seconds(clock::now());
        let last = self.slab_size.slab_of_seconds(now).saturating_sub(2);
        let slabs = self.slabs(partition, i64::MIN, last).await?;
        let empty: Vec<i64> = stream::iter(slabs)
            .map(|slab| async move {
                let (group, topic, part) = part(self, partition);
                let held = self
                    .session
                    .execute_unpaged(&self.statements.select_slab_any, (group, topic, part, slab))
                    .await
                    .map_err(Classify::into_store)?
                    .into_rows_result()
                    .map_err(StoreError::rejected)?
                    .rows_num();
                Ok::<_, StoreError>((held == 0).then_some(slab))
            })
            .buffer_unordered(CONCURRENT_SLABS)
            .try_filter_map(|slab| async move { Ok(slab) })
            .try_collect()
            .await?;
        if empty.is_empty() {
            return Ok(());
        }
        debug!(%partition, slabs = empty.len(), "pruning empty slabs from the index");
        let mut writes = Writes::default();
        for slab in empty {
            let (group, topic, part) = part(self, partition);
            writes.push(
                &self.statements.delete_slab_index,
                (removal, group, topic, part, slab),
            );
        }
        writes.execute(&self.session).await
    }

    /// The statements of a batch's timer changes, in order. A clear removes
    /// the key's stored times (read first) and those the batch scheduled
    /// before it.
    pub(crate) async fn timer_writes(
        &self,
        partition: &TopicPartition,
        changes: &[TimerWrite],
        writes: &mut Writes,
    ) -> Result<(), StoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        let fence = self.fence(partition).await?;
        let mut live: HashMap<(Key, TimerKind), BTreeSet<i64>> = HashMap::new();
        for write in changes {
            if write.change == TimerChange::Clear
                && !live.contains_key(&(write.key.clone(), write.kind))
            {
                let stored = self
                    .stored_seconds(partition, &write.key, write.kind)
                    .await?;
                live.insert(
                    (write.key.clone(), write.kind),
                    stored.into_iter().collect(),
                );
            }
        }
        for write in changes {
            let times = live.get_mut(&(write.key.clone(), write.kind));
            self.timer_statements(partition, write, times, fence.next(), writes)?;
        }
        Ok(())
    }

    /// The statements of one timer change; `times` are the key's times
    /// (stored, and changed by the batch so far) when the batch clears it.
    fn timer_statements(
        &self,
        partition: &TopicPartition,
        TimerWrite { key, kind, change }: &TimerWrite,
        times: Option<&mut BTreeSet<i64>>,
        timestamp: i64,
        writes: &mut Writes,
    ) -> Result<(), StoreError> {
        let code = kind_code(*kind)?;
        let (group, topic, part) = part(self, partition);
        let name = key.to_string();
        // Removes the key's timer at `at` from its slab.
        let delete_slab_row = |writes: &mut Writes, at: i64| {
            let slab = self.slab_size.slab_of_seconds(at);
            let row = (
                timestamp,
                group.clone(),
                topic.clone(),
                part,
                slab,
                at,
                name.clone(),
                code,
            );
            writes.push(&self.statements.delete_slab, row);
        };
        match change {
            TimerChange::Schedule { time, trace } => {
                let at = to_seconds(*time);
                let slab = self.slab_size.slab_of_seconds(at);
                let trace = trace.as_deref().map(str::to_owned);
                let ttl = self.ttl;
                writes.push(
                    &self.statements.insert_slab,
                    (
                        group.clone(),
                        topic.clone(),
                        part,
                        slab,
                        at,
                        name.clone(),
                        code,
                        trace,
                        ttl,
                        timestamp,
                    ),
                );
                writes.push(
                    &self.statements.insert_slab_index,
                    (group.clone(), topic.clone(), part, slab, ttl, timestamp),
                );
                writes.push(
                    &self.statements.insert_timer_key,
                    (group, topic, part, name, code, at, ttl, timestamp),
                );
                if let Some(times) = times {
                    times.insert(at);
                }
            }
            TimerChange::Unschedule { time } => {
                let at = to_seconds(*time);
                delete_slab_row(writes, at);
                writes.push(
                    &self.statements.delete_timer_key,
                    (timestamp, group, topic, part, name, code, at),
                );
                if let Some(times) = times {
                    times.remove(&at);
                }
            }
            TimerChange::Clear => {
                for at in times.map(std::mem::take).unwrap_or_default() {
                    delete_slab_row(writes, at);
                }
                writes.push(
                    &self.statements.delete_timer_kind,
                    (timestamp, group, topic, part, name, code),
                );
            }
        }
        Ok(())
    }
}
