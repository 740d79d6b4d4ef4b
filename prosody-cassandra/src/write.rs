//! The writes of one commit, as one request: a statement alone, or a
//! logged batch of them.

use crate::error::Classify;
use prosody_contracts::store::StoreError;
use scylla::client::session::Session;
use scylla::serialize::row::{RowSerializationContext, SerializeRow};
use scylla::serialize::writers::RowWriter;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The most bytes of bound values in one logged batch: well below
/// Cassandra's `batch_size_fail_threshold`, which refuses a larger batch
/// of several partitions, with room for each statement's overhead.
pub(crate) const CHUNK_BYTES: usize = 32 * 1024;

/// What each statement adds beyond its values (cell and row headers).
pub(crate) const ROW_OVERHEAD: usize = 64;

/// One statement's values.
pub(crate) type Row = Box<dyn SerializeRow + Send + Sync>;

/// The statements of one commit, in order, with each row's estimated size.
#[derive(Default)]
pub(crate) struct Writes {
    statements: Vec<PreparedStatement>,
    rows: Vec<Row>,
    sizes: Vec<usize>,
}

impl Writes {
    pub(crate) fn push(
        &mut self,
        statement: &PreparedStatement,
        row: impl SerializeRow + Send + Sync + 'static,
    ) {
        self.sizes.push(ROW_OVERHEAD + size(statement, &row));
        self.statements.push(statement.clone());
        self.rows.push(Box::new(row));
    }

    pub(crate) fn len(&self) -> usize {
        self.statements.len()
    }

    /// Adds `other`'s writes after these.
    pub(crate) fn append(&mut self, other: Self) {
        self.statements.extend(other.statements);
        self.rows.extend(other.rows);
        self.sizes.extend(other.sizes);
    }

    /// The estimated bytes of the writes, as chunks count them.
    pub(crate) fn bytes(&self) -> usize {
        self.sizes.iter().sum()
    }

    /// Runs the writes: one statement on its own, up to [`CHUNK_BYTES`] as
    /// a logged batch, which Cassandra applies whole or not at all (its
    /// batch log replays a batch a coordinator accepted, even if the
    /// coordinator fails midway), though readers may see part of it while
    /// it applies. More go as several logged batches, one after another:
    /// each whole, together not atomic, and, like every commit, safe to
    /// write again.
    pub(crate) async fn execute(self, session: &Session) -> Result<(), StoreError> {
        let mut chunk = Self::default();
        let mut bytes = 0;
        let rows = self.statements.into_iter().zip(self.rows).zip(self.sizes);
        for ((statement, row), size) in rows {
            if !chunk.statements.is_empty() && bytes + size > CHUNK_BYTES {
                std::mem::take(&mut chunk).run(session).await?;
                bytes = 0;
            }
            chunk.statements.push(statement);
            chunk.rows.push(row);
            bytes += size;
        }
        chunk.run(session).await
    }

    async fn run(mut self, session: &Session) -> Result<(), StoreError> {
        match self.statements.len() {
            0 => Ok(()),
            1 => {
                let (Some(statement), Some(row)) = (self.statements.pop(), self.rows.pop()) else {
                    return Ok(());
                };
                session
                    .execute_unpaged(&statement, row)
                    .await
                    .map(drop)
                    .map_err(Classify::into_store)
            }
            _ => {
                let mut batch = Batch::new(BatchType::Logged);
                for statement in self.statements {
                    batch.append_statement(statement);
                }
                // Every statement carries its own timestamp: replaying the
                // batch writes the same cells.
                batch.set_is_idempotent(true);
                session
                    .batch(&batch, &self.rows)
                    .await
                    .map(drop)
                    .map_err(Classify::into_store)
            }
        }
    }
}

/// The bytes of `row`'s values as `statement` binds them (a row that does
/// not serialize counts as a full chunk, so it goes alone, and its
/// execution reports the error).
fn size(statement: &PreparedStatement, row: &impl SerializeRow) -> usize {
    let specs = statement.get_variable_col_specs();
    let context = RowSerializationContext::from_specs(specs.as_slice());
    let mut bytes = Vec::new();
    match row.serialize(&context, &mut RowWriter::new(&mut bytes)) {
        Ok(()) => bytes.len(),
        Err(_) => CHUNK_BYTES,
    }
}

/// Write timestamps of dedup records and of the peer directory (peers and
/// publications), in microseconds since the epoch, strictly increasing
/// within the process. A dedup record belongs to no partition, and every
/// write of one is the same insert, so clocks need not agree across
/// members; a peer's row is written by its own process alone, so this
/// clock orders its writes; a publication's, by the members of its owning
/// group, so the latest wins as far as their clocks agree. (Timer and
/// deferral writes take theirs from the partition's
/// [`Fence`](crate::fence::Fence).)
#[derive(Debug, Default)]
pub(crate) struct WriteClock {
    last: AtomicI64,
}

impl WriteClock {
    pub(crate) fn next(&self) -> i64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let next = now.max(last.saturating_add(1));
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WriteClock;

    #[test]
    fn timestamps_strictly_increase() {
        let clock = WriteClock::default();
        let mut last = clock.next();
        for _ in 0..10_000 {
            let next = clock.next();
            assert!(next > last, "{next} after {last}");
            last = next;
        }
    }
}
