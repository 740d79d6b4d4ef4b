//! The keyed-state tables: each (group, partition, collection, key) is one
//! Cassandra partition of `state_cells`, its items clustered in byte
//! order, so point reads and ordered pages read one partition; and each
//! collection's identity in `state_collections`.
//!
//! Writes carry the partition's fence timestamps (so the writes of one
//! batch apply in order, and an old owner's late write loses to a new
//! owner's) and the collection's TTL: `USING TTL 0` (none) for a
//! collection without one. A clear is one partition deletion.

use crate::Inner;
use crate::config::ttl_seconds;
use crate::error::Classify;
use crate::write::Writes;
use bytes::Bytes;
use futures_util::TryStreamExt as _;
use prosody_core::broker::TopicPartition;
use prosody_core::key::Key;
use prosody_core::store::{Direction, ItemRange, StateChange, StateWrite, StoreError};
use scylla::client::session::Session;
use scylla::errors::PrepareError;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency};

/// The columns that name one (collection, key) of a partition.
const SLOT: &str = "group_id = ? AND topic = ? AND part = ? AND coll = ? AND key = ?";

/// The keyed-state statements, prepared at connect.
#[derive(Debug)]
pub(crate) struct CellStatements {
    put: PreparedStatement,
    delete: PreparedStatement,
    clear: PreparedStatement,
    select: PreparedStatement,
    /// Pages: `[ascending, descending]`, without and with an upper end.
    pages: [PreparedStatement; 2],
    pages_until: [PreparedStatement; 2],
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
                "SELECT item, value FROM {ks}.state_cells WHERE {SLOT} AND item >= ? {until} \
                 ORDER BY item {order} LIMIT ?"
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
                "INSERT INTO {ks}.state_cells (group_id, topic, part, coll, key, item, value) \
                 VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
            ))
            .await?,
            delete: prepare(format!(
                "DELETE FROM {ks}.state_cells USING TIMESTAMP ? WHERE {SLOT} AND item = ?"
            ))
            .await?,
            clear: prepare(format!(
                "DELETE FROM {ks}.state_cells USING TIMESTAMP ? WHERE {SLOT}"
            ))
            .await?,
            select: prepare(format!(
                "SELECT value FROM {ks}.state_cells WHERE {SLOT} AND item = ?"
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

impl Inner {
    /// Records `identity` for `name` unless one is recorded (a lightweight
    /// transaction), then reads the recorded one at `SERIAL`.
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
        let rows = self
            .session
            .execute_unpaged(
                &self.statements.cells.select,
                (group, topic, part, coll, key, item),
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
        let (group, topic, part, coll, key) = slot(self, partition, collection, key);
        let order = usize::from(direction == Direction::Backward);
        let limit = i32::try_from(limit).unwrap_or(i32::MAX).max(1);
        let from = range.from.to_vec();
        let cells = &self.statements.cells;
        let pager = match &range.until {
            None => {
                let values = (group, topic, part, coll, key, from, limit);
                self.session
                    .execute_iter(cells.pages[order].clone(), values)
                    .await
            }
            Some(until) => {
                let values = (group, topic, part, coll, key, from, until.to_vec(), limit);
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
        for write in changes {
            let ttl = write.ttl.map_or(0, ttl_seconds);
            self.push_state(partition, write, ttl, fence.next(), writes);
        }
        Ok(())
    }

    /// The statement of one state change, with `ttl` (seconds, 0 for none)
    /// and `timestamp`.
    pub(crate) fn push_state(
        &self,
        partition: &TopicPartition,
        write: &StateWrite,
        ttl: i32,
        timestamp: i64,
        writes: &mut Writes,
    ) {
        let cells = &self.statements.cells;
        let (group, topic, part, coll, key) = slot(self, partition, &write.collection, &write.key);
        match &write.change {
            StateChange::Put { item, value } => {
                let row = (
                    group,
                    topic,
                    part,
                    coll,
                    key,
                    item.to_vec(),
                    value.to_vec(),
                    ttl,
                    timestamp,
                );
                writes.push(&cells.put, row);
            }
            StateChange::Delete { item } => {
                let row = (timestamp, group, topic, part, coll, key, item.to_vec());
                writes.push(&cells.delete, row);
            }
            StateChange::Clear => {
                writes.push(&cells.clear, (timestamp, group, topic, part, coll, key));
            }
        }
    }
}
