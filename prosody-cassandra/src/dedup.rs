//! The dedup store's table: one row per (group, dedup key), written with
//! the record's TTL (at most the retention), so Cassandra forgets it by
//! itself.

use crate::Inner;
use crate::config::ttl_seconds;
use crate::error::Classify;
use crate::write::Writes;
use prosody_contracts::store::{DedupKey, DedupWrite, StoreError};

impl Inner {
    pub(crate) async fn contains(&self, key: DedupKey) -> Result<bool, StoreError> {
        let values = (self.group.to_string(), key.to_bytes().to_vec());
        let rows = self
            .session
            .execute_unpaged(&self.statements.select_dedup, values)
            .await
            .map_err(Classify::into_store)?
            .into_rows_result()
            .map_err(StoreError::rejected)?;
        Ok(rows.rows_num() > 0)
    }

    pub(crate) fn dedup_writes(&self, records: &[DedupWrite], writes: &mut Writes) {
        for DedupWrite { key, ttl } in records {
            let ttl = ttl_seconds(*ttl).min(self.ttl);
            writes.push(
                &self.statements.insert_dedup,
                (
                    self.group.to_string(),
                    key.to_bytes().to_vec(),
                    ttl,
                    self.clock.next(),
                ),
            );
        }
    }
}
