//! The writes of one commit, as one request: a statement alone, or a
//! logged batch of them.

use crate::error::Classify;
use prosody_core::store::StoreError;
use scylla::client::session::Session;
use scylla::serialize::row::SerializeRow;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// One statement's values.
pub(crate) type Row = Box<dyn SerializeRow + Send + Sync>;

/// The statements of one commit, in order.
#[derive(Default)]
pub(crate) struct Writes {
    statements: Vec<PreparedStatement>,
    rows: Vec<Row>,
}

impl Writes {
    pub(crate) fn push(
        &mut self,
        statement: &PreparedStatement,
        row: impl SerializeRow + Send + Sync + 'static,
    ) {
        self.statements.push(statement.clone());
        self.rows.push(Box::new(row));
    }

    pub(crate) fn len(&self) -> usize {
        self.statements.len()
    }

    /// Runs the writes: one statement on its own, several as a logged
    /// batch, which Cassandra applies whole or not at all (its batch log
    /// replays a batch a coordinator accepted, even if the coordinator
    /// fails midway), though readers may see part of it while it applies.
    pub(crate) async fn execute(mut self, session: &Session) -> Result<(), StoreError> {
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

/// Write timestamps in microseconds since the epoch, strictly increasing
/// within the process: of two writes of one cell, the later one wins, and
/// the writes of one batch apply in their order (a clear then a schedule of
/// one key keeps the schedule).
///
/// Across processes the wall clocks order the writes: members' clocks must
/// agree to well within the time a partition takes to move between them
/// (NTP keeps them to milliseconds; a rebalance takes longer).
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
