//! The keyed-state tables: the cells of each (group, partition,
//! collection, key) in `state_items`, spread over buckets as the
//! collection's [`Layout`] says, each bucket one Cassandra partition with
//! its items clustered in byte order; the buckets a deque wrote in
//! `state_buckets`; and each collection's identity in `state_collections`.
//!
//! Writes carry the partition's fence timestamps (so the writes of one
//! batch apply in order, and an old owner's late write loses to a new
//! owner's) and the collection's TTL: `USING TTL 0` (none) for a
//! collection without one. A clear deletes every bucket the collection
//! can use, at one timestamp.

mod layout;

pub(crate) use layout::Layouts;

use crate::Inner;
use crate::config::ttl_seconds;
use crate::error::Classify;
use crate::write::Writes;
use bytes::Bytes;
use futures_util::TryStreamExt as _;
use futures_util::future::try_join_all;
use layout::{Layout, MAP_BUCKETS};
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::key::Key;
use prosody_contracts::store::{Direction, ItemRange, StateChange, StateWrite, StoreError};
use scylla::client::session::Session;
use scylla::errors::PrepareError;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// The columns that name one (collection, key) of a partition.
const SLOT: &str = "group_id = ? AND topic = ? AND part = ? AND coll = ? AND key = ?";

/// The keyed-state statements, prepared at connect.
#[derive(Debug)]
pub(crate) struct CellStatements {
    put: PreparedStatement,
    mark: PreparedStatement,
    delete: PreparedStatement,
    clear: PreparedStatement,
    unmark: PreparedStatement,
    select: PreparedStatement,
    /// Pages: `[ascending, descending]`, without and with an upper end.
    pages: [PreparedStatement; 2],
    pages_until: [PreparedStatement; 2],
    /// A deque's buckets in `[from, to]`: `[ascending, descending]`.
    buckets: [PreparedStatement; 2],
    claim: PreparedStatement,
    identity: PreparedStatement,
}

impl CellStatements {
    pub(crate) async fn prepare(session: &Session, ks: &str) -> Result<Self, PrepareError> {
        let prepare = |cql: String| async move {
            let mut statement = session.prepare(cql).await?;
            statement.set_is_idempotent(true);
            Ok::<_, PrepareError>(statement)
        };
        let page = |until: &str, order: &str| {
            format!(
                "SELECT item, value FROM {ks}.state_items WHERE {SLOT} AND bucket = ? \
                 AND item >= ? {until} ORDER BY item {order} LIMIT ?"
            )
        };
        let buckets = |order: &str| {
            format!(
                "SELECT bucket FROM {ks}.state_buckets WHERE {SLOT} AND bucket >= ? \
                 AND bucket <= ? ORDER BY bucket {order}"
            )
        };
        let mut claim = prepare(format!(
            "INSERT INTO {ks}.state_collections (group_id, name, identity) VALUES (?, ?, ?) \
             IF NOT EXISTS"
        ))
        .await?;
        claim.set_serial_consistency(Some(SerialConsistency::Serial));
        let mut identity = prepare(format!(
            "SELECT identity FROM {ks}.state_collections WHERE group_id = ? AND name = ?"
        ))
        .await?;
        identity.set_consistency(Consistency::Serial);
        Ok(Self {
            put: prepare(format!(
                "INSERT INTO {ks}.state_items (group_id, topic, part, coll, key, bucket, item, \
                 value) VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
            ))
            .await?,
            mark: prepare(format!(
                "INSERT INTO {ks}.state_buckets (group_id, topic, part, coll, key, bucket) \
                 VALUES (?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
            ))
            .await?,
            delete: prepare(format!(
                "DELETE FROM {ks}.state_items USING TIMESTAMP ? WHERE {SLOT} AND bucket = ? \
                 AND item = ?"
            ))
            .await?,
            clear: prepare(format!(
                "DELETE FROM {ks}.state_items USING TIMESTAMP ? WHERE {SLOT} AND bucket = ?"
            ))
            .await?,
            unmark: prepare(format!(
                "DELETE FROM {ks}.state_buckets USING TIMESTAMP ? WHERE {SLOT}"
            ))
            .await?,
            select: prepare(format!(
                "SELECT value FROM {ks}.state_items WHERE {SLOT} AND bucket = ? AND item = ?"
            ))
            .await?,
            pages: [
                prepare(page("", "ASC")).await?,
                prepare(page("", "DESC")).await?,
            ],
            pages_until: [
                prepare(page("AND item < ?", "ASC")).await?,
                prepare(page("AND item < ?", "DESC")).await?,
            ],
            buckets: [
                prepare(buckets("ASC")).await?,
                prepare(buckets("DESC")).await?,
            ],
            claim,
            identity,
        })
    }
}

type SlotColumns = (String, String, i32, String, String);

fn slot(inner: &Inner, partition: &TopicPartition, collection: &str, key: &Key) -> SlotColumns {
    (
        inner.group.to_string(),
        partition.topic.to_string(),
        partition.partition,
        collection.to_owned(),
        key.to_string(),
    )
}

/// The buckets of each deque (collection, key) of one commit that a clear
/// must delete: those the index listed before the commit, and those its
/// earlier puts wrote.
#[derive(Debug, Default)]
pub(crate) struct Cleared(HashMap<(Arc<str>, Key), BTreeSet<i64>>);

impl Inner {
    /// Records `identity` for `name` unless one is recorded (a lightweight
    /// transaction), then reads the recorded one at `SERIAL`; the recorded
    /// one fixes the collection's layout.
    pub(crate) async fn identify(&self, name: &str, identity: &str) -> Result<String, StoreError> {
        let cells = &self.statements.cells;
        let group = self.group.to_string();
        self.session
            .execute_unpaged(&cells.claim, (&group, name, identity))
            .await
            .map_err(Classify::into_store)?;
        let rows = self
            .session
            .execute_unpaged(&cells.identity, (&group, name))
            .await
            .map_err(Classify::into_store)?
            .into_rows_result()
            .map_err(StoreError::rejected)?;
        let (stored,) = rows
            .maybe_first_row::<(String,)>()
            .map_err(StoreError::rejected)?
            .ok_or_else(|| {
                StoreError::unavailable("a recorded collection identity is not visible yet")
            })?;
        self.layouts.learn(name, &stored);
        Ok(stored)
    }

    pub(crate) async fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> Result<Option<Bytes>, StoreError> {
        let (group, topic, part, coll, key) = slot(self, partition, collection, key);
        let bucket = self.layouts.of(collection).bucket(item);
        let rows = self
            .session
            .execute_unpaged(
                &self.statements.cells.select,
                (group, topic, part, coll, key, bucket, item),
            )
            .await
            .map_err(Classify::into_store)?
            .into_rows_result()
            .map_err(StoreError::rejected)?;
        let value = rows
            .maybe_first_row::<(Vec<u8>,)>()
            .map_err(StoreError::rejected)?;
        Ok(value.map(|(value,)| Bytes::from(value)))
    }

    pub(crate) async fn cells(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        range: &ItemRange,
        direction: Direction,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        let slot = slot(self, partition, collection, key);
        let layout = self.layouts.of(collection);
        match layout {
            Layout::Single => self.page(&slot, 0, range, direction, limit).await,
            Layout::Hashed => {
                let pages = (0..MAP_BUCKETS).map(|b| self.page(&slot, b, range, direction, limit));
                let mut cells: Vec<_> = try_join_all(pages).await?.concat();
                cells.sort_unstable_by(|(a, _), (b, _)| match direction {
                    Direction::Forward => a.cmp(b),
                    Direction::Backward => b.cmp(a),
                });
                cells.truncate(limit);
                Ok(cells)
            }
            Layout::Ranged => {
                let from = layout.bucket(&range.from);
                let to = range.until.as_ref().map_or(i64::MAX, |u| layout.bucket(u));
                let (group, topic, part, coll, key) = slot.clone();
                let order = usize::from(direction == Direction::Backward);
                let statement = self.statements.cells.buckets[order].clone();
                let values = (group, topic, part, coll, key, from, to);
                let mut buckets = self
                    .session
                    .execute_iter(statement, values)
                    .await
                    .map_err(Classify::into_store)?
                    .rows_stream::<(i64,)>()
                    .map_err(Classify::into_store)?;
                let mut cells = Vec::new();
                while cells.len() < limit {
                    let Some((bucket,)) = buckets.try_next().await.map_err(Classify::into_store)?
                    else {
                        break;
                    };
                    let rest = limit - cells.len();
                    cells.extend(self.page(&slot, bucket, range, direction, rest).await?);
                }
                Ok(cells)
            }
        }
    }

    /// Up to `limit` items of `range` in one bucket, the first in
    /// `direction`.
    async fn page(
        &self,
        slot: &SlotColumns,
        bucket: i64,
        range: &ItemRange,
        direction: Direction,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        let (group, topic, part, coll, key) = slot.clone();
        let order = usize::from(direction == Direction::Backward);
        let limit = i32::try_from(limit).unwrap_or(i32::MAX).max(1);
        let from = range.from.to_vec();
        let cells = &self.statements.cells;
        let pager = match &range.until {
            None => {
                let values = (group, topic, part, coll, key, bucket, from, limit);
                self.session
                    .execute_iter(cells.pages[order].clone(), values)
                    .await
            }
            Some(until) => {
                let until = until.to_vec();
                let values = (group, topic, part, coll, key, bucket, from, until, limit);
                self.session
                    .execute_iter(cells.pages_until[order].clone(), values)
                    .await
            }
        };
        pager
            .map_err(Classify::into_store)?
            .rows_stream::<(Vec<u8>, Vec<u8>)>()
            .map_err(Classify::into_store)?
            .map_ok(|(item, value)| (Bytes::from(item), Bytes::from(value)))
            .try_collect()
            .await
            .map_err(Classify::into_store)
    }

    /// What the clears among `changes` must delete: for each deque
    /// (collection, key) they clear, the buckets its index lists.
    pub(crate) async fn cleared(
        &self,
        partition: &TopicPartition,
        changes: &[StateWrite],
    ) -> Result<Cleared, StoreError> {
        let mut cleared = Cleared::default();
        for write in changes {
            let slot = (write.collection.clone(), write.key.clone());
            let ranged = self.layouts.of(&write.collection) == Layout::Ranged;
            if !ranged || write.change != StateChange::Clear || cleared.0.contains_key(&slot) {
                continue;
            }
            let (group, topic, part, coll, key) =
                self::slot(self, partition, &write.collection, &write.key);
            let values = (group, topic, part, coll, key, i64::MIN, i64::MAX);
            let statement = self.statements.cells.buckets[0].clone();
            let buckets: BTreeSet<i64> = self
                .session
                .execute_iter(statement, values)
                .await
                .map_err(Classify::into_store)?
                .rows_stream::<(i64,)>()
                .map_err(Classify::into_store)?
                .map_ok(|(bucket,)| bucket)
                .try_collect()
                .await
                .map_err(Classify::into_store)?;
            cleared.0.insert(slot, buckets);
        }
        Ok(cleared)
    }

    /// The statements of a batch's state changes, in order, each with the
    /// next timestamp of the partition's fence.
    pub(crate) async fn state_writes(
        &self,
        partition: &TopicPartition,
        changes: &[StateWrite],
        writes: &mut Writes,
    ) -> Result<(), StoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        let fence = self.fence(partition).await?;
        // A deque's clear deletes the buckets its index lists: an
        // unfinished txn's puts must be in it first.
        for write in changes {
            if write.change == StateChange::Clear
                && self.layouts.of(&write.collection) == Layout::Ranged
            {
                self.resolve_key(partition, &write.key).await?;
            }
        }
        let mut cleared = self.cleared(partition, changes).await?;
        for write in changes {
            let ttl = write.ttl.map_or(0, ttl_seconds);
            self.push_state(partition, write, ttl, fence.next(), &mut cleared, writes);
        }
        Ok(())
    }

    /// The statements of one state change, with `ttl` (seconds, 0 for none)
    /// and `timestamp`; `cleared` is what [`Inner::cleared`] read for the
    /// commit, and is kept up to date with its puts.
    pub(crate) fn push_state(
        &self,
        partition: &TopicPartition,
        write: &StateWrite,
        ttl: i32,
        timestamp: i64,
        cleared: &mut Cleared,
        writes: &mut Writes,
    ) {
        let cells = &self.statements.cells;
        let layout = self.layouts.of(&write.collection);
        let columns = slot(self, partition, &write.collection, &write.key);
        let (group, topic, part, coll, key) = columns.clone();
        match &write.change {
            StateChange::Put { item, value } => {
                let bucket = layout.bucket(item);
                if layout == Layout::Ranged {
                    let slot = (write.collection.clone(), write.key.clone());
                    cleared.0.entry(slot).or_default().insert(bucket);
                    let (group, topic, part, coll, key) = columns;
                    let row = (group, topic, part, coll, key, bucket, ttl, timestamp);
                    writes.push(&cells.mark, row);
                }
                let (item, value) = (item.to_vec(), value.to_vec());
                let row = (
                    group, topic, part, coll, key, bucket, item, value, ttl, timestamp,
                );
                writes.push(&cells.put, row);
            }
            StateChange::Delete { item } => {
                let bucket = layout.bucket(item);
                let row = (
                    timestamp,
                    group,
                    topic,
                    part,
                    coll,
                    key,
                    bucket,
                    item.to_vec(),
                );
                writes.push(&cells.delete, row);
            }
            StateChange::Clear => {
                let buckets: Vec<i64> = match layout {
                    Layout::Single => vec![0],
                    Layout::Hashed => (0..MAP_BUCKETS).collect(),
                    // Bucket 0 always: it holds the empty item (a
                    // deque's bounds), so an old owner's late push, which
                    // the index did not list yet, cannot show through.
                    Layout::Ranged => {
                        let slot = (write.collection.clone(), write.key.clone());
                        let mut known = cleared.0.get(&slot).cloned().unwrap_or_default();
                        known.insert(0);
                        known.into_iter().collect()
                    }
                };
                for bucket in buckets {
                    let (group, topic, part, coll, key) = columns.clone();
                    let row = (timestamp, group, topic, part, coll, key, bucket);
                    writes.push(&cells.clear, row);
                }
                if layout == Layout::Ranged {
                    writes.push(&cells.unmark, (timestamp, group, topic, part, coll, key));
                }
            }
        }
    }
}
