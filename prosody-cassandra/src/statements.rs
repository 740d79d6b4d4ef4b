//! Every statement the stores run, prepared once at connect.

use crate::cells::CellStatements;
use crate::fence::Owners;
use crate::staged::TxnStatements;
use scylla::client::session::Session;
use scylla::errors::PrepareError;
use scylla::statement::prepared::PreparedStatement;

/// Column lists the statements share: a partition of a group.
pub(crate) const PART: &str = "group_id = ? AND topic = ? AND part = ?";

/// The prepared statements.
///
/// Invariant: each is prepared against the keyspace's tables at
/// [`crate::schema::VERSION`]; writes of the stores carry `USING TIMESTAMP
/// ?` (so the writes of one batch apply in the order given, and an old
/// owner's lose to a new one's) and inserts a TTL. The ownership table's
/// writes are conditional, and its read serial.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(crate) insert_slab: PreparedStatement,
    pub(crate) insert_slab_index: PreparedStatement,
    pub(crate) insert_timer_key: PreparedStatement,
    pub(crate) delete_slab: PreparedStatement,
    pub(crate) delete_timer_key: PreparedStatement,
    pub(crate) delete_timer_kind: PreparedStatement,
    pub(crate) delete_slab_index: PreparedStatement,
    pub(crate) select_timer_key: PreparedStatement,
    pub(crate) select_slab_index: PreparedStatement,
    pub(crate) select_slab: PreparedStatement,
    pub(crate) select_slab_any: PreparedStatement,
    pub(crate) insert_deferred: PreparedStatement,
    pub(crate) set_failures: PreparedStatement,
    pub(crate) delete_deferred: PreparedStatement,
    pub(crate) delete_deferred_key: PreparedStatement,
    pub(crate) insert_deferred_index: PreparedStatement,
    pub(crate) delete_deferred_index: PreparedStatement,
    pub(crate) select_deferred: PreparedStatement,
    pub(crate) select_deferred_keys: PreparedStatement,
    pub(crate) set_deferred_counts: PreparedStatement,
    pub(crate) select_deferred_counts: PreparedStatement,
    pub(crate) insert_dedup: PreparedStatement,
    pub(crate) select_dedup: PreparedStatement,
    pub(crate) owners: Owners,
    pub(crate) cells: CellStatements,
    pub(crate) txns: TxnStatements,
}

impl Statements {
    #[allow(clippy::too_many_lines, reason = "a flat list of statements")]
    pub(crate) async fn prepare(session: &Session, ks: &str) -> Result<Self, PrepareError> {
        let prepare = |cql: String| async move {
            let mut statement = session.prepare(cql).await?;
            // Every write is idempotent (timestamps fix their order), and
            // so is every read: the driver may retry them.
            statement.set_is_idempotent(true);
            Ok::<_, PrepareError>(statement)
        };
        Ok(Self {
            insert_slab: prepare(format!(
                "INSERT INTO {ks}.timer_slabs (group_id, topic, part, slab, at, key, kind, trace) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
            ))
            .await?,
            insert_slab_index: prepare(format!(
                "INSERT INTO {ks}.timer_slab_index (group_id, topic, part, slab) \
                 VALUES (?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
            ))
            .await?,
            insert_timer_key: prepare(format!(
                "INSERT INTO {ks}.timer_keys (group_id, topic, part, key, kind, at) \
                 VALUES (?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
            ))
            .await?,
            delete_slab: prepare(format!(
                "DELETE FROM {ks}.timer_slabs USING TIMESTAMP ? \
                 WHERE {PART} AND slab = ? AND at = ? AND key = ? AND kind = ?"
            ))
            .await?,
            delete_timer_key: prepare(format!(
                "DELETE FROM {ks}.timer_keys USING TIMESTAMP ? \
                 WHERE {PART} AND key = ? AND kind = ? AND at = ?"
            ))
            .await?,
            delete_timer_kind: prepare(format!(
                "DELETE FROM {ks}.timer_keys USING TIMESTAMP ? WHERE {PART} AND key = ? AND kind = ?"
            ))
            .await?,
            delete_slab_index: prepare(format!(
                "DELETE FROM {ks}.timer_slab_index USING TIMESTAMP ? WHERE {PART} AND slab = ?"
            ))
            .await?,
            select_timer_key: prepare(format!(
                "SELECT at FROM {ks}.timer_keys WHERE {PART} AND key = ? AND kind = ?"
            ))
            .await?,
            select_slab_index: prepare(format!(
                "SELECT slab FROM {ks}.timer_slab_index WHERE {PART} AND slab >= ? AND slab <= ?"
            ))
            .await?,
            select_slab: prepare(format!(
                "SELECT at, key, kind, trace FROM {ks}.timer_slabs \
                 WHERE {PART} AND slab = ? AND at >= ? AND at < ?"
            ))
            .await?,
            select_slab_any: prepare(format!(
                "SELECT at FROM {ks}.timer_slabs WHERE {PART} AND slab = ? LIMIT 1"
            ))
            .await?,
            insert_deferred: prepare(format!(
                "INSERT INTO {ks}.deferred (group_id, topic, part, key, record_offset) \
                 VALUES (?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
            ))
            .await?,
            set_failures: prepare(format!(
                "UPDATE {ks}.deferred USING TTL ? AND TIMESTAMP ? SET failures = ? \
                 WHERE {PART} AND key = ?"
            ))
            .await?,
            delete_deferred: prepare(format!(
                "DELETE FROM {ks}.deferred USING TIMESTAMP ? \
                 WHERE {PART} AND key = ? AND record_offset = ?"
            ))
            .await?,
            delete_deferred_key: prepare(format!(
                "DELETE FROM {ks}.deferred USING TIMESTAMP ? WHERE {PART} AND key = ?"
            ))
            .await?,
            insert_deferred_index: prepare(format!(
                "INSERT INTO {ks}.deferred_keys (group_id, topic, part, key) \
                 VALUES (?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
            ))
            .await?,
            delete_deferred_index: prepare(format!(
                "DELETE FROM {ks}.deferred_keys USING TIMESTAMP ? WHERE {PART} AND key = ?"
            ))
            .await?,
            select_deferred: prepare(format!(
                "SELECT record_offset, failures FROM {ks}.deferred WHERE {PART} AND key = ?"
            ))
            .await?,
            select_deferred_keys: prepare(format!(
                "SELECT key FROM {ks}.deferred_keys WHERE {PART}"
            ))
            .await?,
            set_deferred_counts: prepare(format!(
                "UPDATE {ks}.deferred_counts USING TTL ? AND TIMESTAMP ? \
                 SET keys = ?, records = ? WHERE {PART}"
            ))
            .await?,
            select_deferred_counts: prepare(format!(
                "SELECT keys, records FROM {ks}.deferred_counts WHERE {PART}"
            ))
            .await?,
            insert_dedup: prepare(format!(
                "INSERT INTO {ks}.dedup (group_id, id) VALUES (?, ?) USING TTL ? AND TIMESTAMP ?"
            ))
            .await?,
            select_dedup: prepare(format!(
                "SELECT id FROM {ks}.dedup WHERE group_id = ? AND id = ?"
            ))
            .await?,
            owners: Owners::prepare(session, ks).await?,
            cells: CellStatements::prepare(session, ks).await?,
            txns: TxnStatements::prepare(session, ks).await?,
        })
    }
}
