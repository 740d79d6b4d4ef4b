//! What the poll loop and a partition task both see of the partition:
//! its backlog, committable offset, pause, progress and halt.

use crate::access::Tally;
use crate::clock;
use crate::metrics::Readings;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// No committable offset yet.
pub(crate) const NO_OFFSET: i64 = -1;

/// What the poll loop and a partition task both see.
///
/// Invariant: `unsettled` counts records handed to the task and not yet
/// settled; `watermark` is the task's committable offset (or [`NO_OFFSET`]);
/// `paused` is set by the poll loop before it pauses the partition and
/// cleared by exactly one side, which then resumes it (see `Runtime`).
/// `running` counts the attempts that had to wait (each in a task of its
/// own; one that finished on its first poll never counts), and `progress` is when
/// (milliseconds of [`clock::now`]) the task last made progress: a record
/// or timer settled, or work arrived at an idle partition. Failed attempts
/// are not progress: a key retried forever stalls its partition.
#[derive(Debug)]
pub(crate) struct PartitionState {
    pub(crate) unsettled: AtomicUsize,
    pub(crate) watermark: AtomicI64,
    pub(crate) paused: AtomicBool,
    pub(crate) running: AtomicUsize,
    pub(crate) progress: AtomicI64,
    /// A terminal error stopped the partition.
    pub(crate) halted: AtomicBool,
    /// What stopped it, once halted.
    pub(crate) halt_reason: Mutex<Option<Arc<str>>>,
    /// For the gauges, each `-1` until known: the group's committed offset
    /// (read at assignment, then the offset last committed; a group that
    /// never committed: the first offset received), the high
    /// watermark the consumer last saw, the timestamp (milliseconds) of the
    /// oldest unsettled record, and the due time (milliseconds) of the
    /// oldest due timer not yet fired.
    pub(crate) committed: AtomicI64,
    pub(crate) high: AtomicI64,
    pub(crate) oldest: AtomicI64,
    pub(crate) timer_due: AtomicI64,
    /// For the gauges: keys being handled, and records waiting behind one.
    pub(crate) in_flight: AtomicUsize,
    pub(crate) waiting: AtomicUsize,
    /// For the gauges and probes: the deferred keys and records, as the
    /// partition's stores report them.
    pub(crate) deferred: Arc<Tally>,
}

impl Default for PartitionState {
    fn default() -> Self {
        Self {
            unsettled: AtomicUsize::new(0),
            watermark: AtomicI64::new(NO_OFFSET),
            paused: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            progress: AtomicI64::new(clock::now().as_millis()),
            halted: AtomicBool::new(false),
            halt_reason: Mutex::new(None),
            committed: AtomicI64::new(NO_OFFSET),
            high: AtomicI64::new(NO_OFFSET),
            oldest: AtomicI64::new(NO_OFFSET),
            timer_due: AtomicI64::new(NO_OFFSET),
            in_flight: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            deferred: Arc::default(),
        }
    }
}

impl PartitionState {
    /// What the gauges read of it now.
    pub(crate) fn readings(&self) -> Readings {
        let (deferred_keys, deferred_records) = self.deferred.raw();
        Readings {
            deferred_keys,
            deferred_records,
            committed: self.committed.load(Ordering::Relaxed),
            high: self.high.load(Ordering::Relaxed),
            oldest: self.oldest.load(Ordering::Relaxed),
            timer_due: self.timer_due.load(Ordering::Relaxed),
            unsettled: self.unsettled.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            waiting: self.waiting.load(Ordering::Relaxed),
            paused: self.paused.load(Ordering::Relaxed),
        }
    }

    /// Publishes what the gauges read: keys being handled, records waiting
    /// behind them, the oldest unsettled record's timestamp and the next
    /// due timer's second (`None`: nothing).
    pub(crate) fn publish(
        &self,
        in_flight: usize,
        waiting: usize,
        oldest: Option<i64>,
        next_due: Option<i64>,
    ) {
        self.in_flight.store(in_flight, Ordering::Relaxed);
        self.waiting.store(waiting, Ordering::Relaxed);
        self.oldest
            .store(oldest.unwrap_or(NO_OFFSET), Ordering::Relaxed);
        let due = next_due.map_or(NO_OFFSET, |second| second.saturating_mul(1000));
        self.timer_due.store(due, Ordering::Relaxed);
    }

    /// Whether a terminal error stopped the partition.
    pub(crate) fn halted(&self) -> bool {
        self.halted.load(Ordering::Acquire)
    }

    /// What halted the partition; `None` while it runs.
    pub(crate) fn halt_reason(&self) -> Option<Arc<str>> {
        if !self.halted() {
            return None;
        }
        self.halt_reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether work is pending and nothing progressed for `threshold` (a
    /// halted partition is [halted](Self::halted), not stalled).
    pub(crate) fn stalled(&self, threshold: Duration) -> bool {
        if self.halted() {
            return false;
        }
        let pending =
            self.running.load(Ordering::Acquire) > 0 || self.unsettled.load(Ordering::Acquire) > 0;
        let idle = clock::now().as_millis() - self.progress.load(Ordering::Acquire);
        let threshold = i64::try_from(threshold.as_millis()).unwrap_or(i64::MAX);
        pending && idle >= threshold
    }

    pub(crate) fn stamp(&self) {
        self.progress
            .store(clock::now().as_millis(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::PartitionState;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    const THRESHOLD: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn only_pending_work_without_progress_is_a_stall() {
        let state = PartitionState::default();
        tokio::time::advance(THRESHOLD * 2).await;
        assert!(!state.stalled(THRESHOLD), "idle is not stalled");
        state.unsettled.store(1, Ordering::Release);
        assert!(state.stalled(THRESHOLD), "pending, no progress");
        state.stamp();
        assert!(!state.stalled(THRESHOLD), "progress just now");
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(!state.stalled(THRESHOLD), "within the threshold");
        state.unsettled.store(0, Ordering::Release);
        state.running.store(1, Ordering::Release);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(
            state.stalled(THRESHOLD),
            "a running call past the threshold"
        );
        state.halted.store(true, Ordering::Release);
        assert!(state.halted());
        assert!(!state.stalled(THRESHOLD), "halted is told apart");
    }
}
