//! What a partition's runtime knows of its deferred keys and records, for
//! the gauges and the probes.

use crate::store::DeferCounts;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Not read yet.
const UNKNOWN: i64 = -1;

/// A partition's deferred keys and records as its stores last reported
/// them: read when the partition's stores open, then after each commit
/// that changes deferrals (from the stores' memory, never a read per
/// event).
///
/// Invariant: both values are [`UNKNOWN`] until the first report, and
/// afterwards the two halves of one report (a reader may see one report's
/// keys with the next one's records, for an instant). Reports taken with
/// [`refresh`](Self::refresh) are read and stored under one lock, so of
/// commits that land concurrently the last to refresh stores the newest
/// counts: an older read never overwrites a newer one.
#[derive(Debug)]
pub(crate) struct Tally {
    keys: AtomicI64,
    records: AtomicI64,
    reading: Mutex<()>,
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            keys: AtomicI64::new(UNKNOWN),
            records: AtomicI64::new(UNKNOWN),
            reading: Mutex::new(()),
        }
    }
}

impl Tally {
    /// Reads the counts with `read` (which must not block: the stores'
    /// memory) and records them, under the lock; whether `read` answered.
    pub(crate) fn refresh(&self, read: impl FnOnce() -> Option<DeferCounts>) -> bool {
        let _reading = self.reading.lock().unwrap_or_else(PoisonError::into_inner);
        read().map(|counts| self.set(counts)).is_some()
    }

    /// Records what the stores report.
    pub(crate) fn set(&self, counts: DeferCounts) {
        let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.keys.store(signed(counts.keys), Ordering::Relaxed);
        self.records
            .store(signed(counts.records), Ordering::Relaxed);
    }

    /// The keys and records, each `-1` until the stores reported.
    pub(crate) fn raw(&self) -> (i64, i64) {
        (
            self.keys.load(Ordering::Relaxed),
            self.records.load(Ordering::Relaxed),
        )
    }

    /// The last report; `None` before the first.
    pub(crate) fn get(&self) -> Option<DeferCounts> {
        let (keys, records) = self.raw();
        Some(DeferCounts {
            keys: u64::try_from(keys).ok()?,
            records: u64::try_from(records).ok()?,
        })
    }
}
