//! What a txn keeps: its statements, and a staged change as its row holds
//! it.

use crate::config::ttl_seconds;
use crate::statements::PART;
use bytes::Bytes;
use prosody_contracts::store::{StateChange, StateWrite, StoreError};
use scylla::client::session::Session;
use scylla::errors::PrepareError;
use scylla::statement::prepared::PreparedStatement;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// The txn statements, prepared at connect.
#[derive(Debug)]
pub(crate) struct TxnStatements {
    pub(super) begin: PreparedStatement,
    pub(super) stage: PreparedStatement,
    pub(super) commit: PreparedStatement,
    pub(super) txns: PreparedStatement,
    pub(super) txn: PreparedStatement,
    pub(super) staged: PreparedStatement,
    pub(super) forget_staged: PreparedStatement,
    pub(super) forget_txn: PreparedStatement,
}

impl TxnStatements {
    pub(crate) async fn prepare(session: &Session, ks: &str) -> Result<Self, PrepareError> {
        let prepare = |cql: String| async move {
            let mut statement = session.prepare(cql).await?;
            statement.set_is_idempotent(true);
            Ok::<_, PrepareError>(statement)
        };
        Ok(Self {
            begin: prepare(format!(
                "INSERT INTO {ks}.state_txns \
                 (group_id, topic, part, txn, staged_at, committed, rows, keys) \
                 VALUES (?, ?, ?, ?, ?, false, ?, ?) USING TTL ? AND TIMESTAMP ?"
            ))
            .await?,
            stage: prepare(format!(
                "INSERT INTO {ks}.state_staged \
                 (group_id, topic, part, txn, seq, coll, key, op, item, value, ttl, ts) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
            ))
            .await?,
            commit: prepare(format!(
                "UPDATE {ks}.state_txns USING TTL ? AND TIMESTAMP ? SET committed = true \
                 WHERE {PART} AND txn = ?"
            ))
            .await?,
            txns: prepare(format!(
                "SELECT txn, keys FROM {ks}.state_txns WHERE {PART}"
            ))
            .await?,
            txn: prepare(format!(
                "SELECT staged_at, committed, rows FROM {ks}.state_txns WHERE {PART} AND txn = ?"
            ))
            .await?,
            staged: prepare(format!(
                "SELECT coll, key, op, item, value, ttl, ts FROM {ks}.state_staged \
                 WHERE {PART} AND txn = ?"
            ))
            .await?,
            forget_staged: prepare(format!(
                "DELETE FROM {ks}.state_staged USING TIMESTAMP ? WHERE {PART} AND txn = ?"
            ))
            .await?,
            forget_txn: prepare(format!(
                "DELETE FROM {ks}.state_txns USING TIMESTAMP ? WHERE {PART} AND txn = ?"
            ))
            .await?,
        })
    }
}

/// One staged change, as `state_staged` keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Staged {
    pub(super) coll: String,
    pub(super) key: String,
    /// 0 put, 1 delete, 2 clear.
    pub(super) op: i8,
    pub(super) item: Vec<u8>,
    pub(super) value: Vec<u8>,
    /// The collection's TTL in seconds, 0 for none.
    pub(super) ttl: i32,
    /// The fence timestamp it is written with.
    pub(super) ts: i64,
}

impl Staged {
    pub(super) fn of(write: &StateWrite, ts: i64) -> Self {
        let (op, item, value) = match &write.change {
            StateChange::Put { item, value } => (0, item.to_vec(), value.to_vec()),
            StateChange::Delete { item } => (1, item.to_vec(), Vec::new()),
            StateChange::Clear => (2, Vec::new(), Vec::new()),
        };
        Self {
            coll: write.collection.to_string(),
            key: write.key.to_string(),
            op,
            item,
            value,
            ttl: write.ttl.map_or(0, ttl_seconds),
            ts,
        }
    }

    /// The change, its TTL counted from `staged_at`, so a late promotion
    /// does not lengthen a cell's life (a put already past its TTL becomes
    /// a delete at its timestamp).
    pub(super) fn change(&self, staged_at: i64, now: i64) -> Result<(StateWrite, i32), StoreError> {
        let change = match self.op {
            0 => StateChange::Put {
                item: Bytes::copy_from_slice(&self.item),
                value: Bytes::copy_from_slice(&self.value),
            },
            1 => StateChange::Delete {
                item: Bytes::copy_from_slice(&self.item),
            },
            2 => StateChange::Clear,
            op => {
                return Err(StoreError::rejected(format!(
                    "a staged state change has the unknown operation {op}"
                )));
            }
        };
        let mut change = change;
        let ttl = if self.ttl == 0 {
            0
        } else {
            let elapsed = (now - staged_at).max(0) / 1000;
            let left = i64::from(self.ttl) - elapsed;
            if left <= 0
                && let StateChange::Put { item, .. } = &change
            {
                // Expired before it was promoted: it still replaces what
                // it replaced, and reads as expired.
                change = StateChange::Delete { item: item.clone() };
            }
            i32::try_from(left).unwrap_or(1).max(1)
        };
        let write = StateWrite {
            collection: Arc::from(self.coll.as_str()),
            key: self.key.as_str().into(),
            change,
            ttl: None,
        };
        Ok((write, ttl))
    }
}

/// Wall-clock milliseconds: when a txn was staged.
pub(super) fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
