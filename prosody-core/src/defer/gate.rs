//! The failure-rate gate: deferral pauses while nearly everything fails.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Buckets the window is cut into; the window slides one bucket at a time.
const BUCKETS: usize = 30;

/// [`BUCKETS`] as a bucket index distance.
const SPAN: i64 = 30;

/// Fewer events than this in the window never close the gate: one failure
/// on a quiet service is not a failure rate.
pub(crate) const MIN_EVENTS: u64 = 10;

#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    events: u64,
    failures: u64,
}

/// The ring of buckets and their running total.
#[derive(Debug, Default)]
struct Window {
    /// Bucket `i` (a stretch of `width` milliseconds of the clock) is at
    /// slot `i mod BUCKETS`.
    buckets: [Counts; BUCKETS],
    /// The latest bucket counted into.
    latest: i64,
    /// The sum of every bucket.
    total: Counts,
}

impl Window {
    /// Moves to bucket `now`, emptying the buckets that fell out of the
    /// window (at most the whole ring, however long the pause).
    fn advance(&mut self, now: i64) {
        let stale = now.saturating_sub(self.latest).min(SPAN);
        for step in 1..=stale {
            let index = self.latest.saturating_add(step);
            let slot = usize::try_from(index.rem_euclid(SPAN)).unwrap_or(0);
            if let Some(bucket) = self.buckets.get_mut(slot) {
                self.total.events = self.total.events.saturating_sub(bucket.events);
                self.total.failures = self.total.failures.saturating_sub(bucket.failures);
                *bucket = Counts::default();
            }
        }
        self.latest = self.latest.max(now);
    }
}

/// Counts of events and transient failures over a sliding window.
///
/// Invariant: the gate is open (deferral allowed) unless the last
/// [`BUCKETS`] buckets of `window / BUCKETS` each (the window, to a bucket's
/// precision) hold at least [`MIN_EVENTS`] events of which more than
/// `threshold` failed. `total` is always the sum of the buckets: a bucket
/// leaving the window is subtracted and emptied as the clock passes it.
/// Memory is the fixed ring; each event costs O(1) amortized.
#[derive(Debug)]
pub(crate) struct Gate {
    threshold: f64,
    /// Milliseconds per bucket, at least one.
    width: i64,
    /// Where bucket numbers count from.
    epoch: Instant,
    window: Mutex<Window>,
}

impl Gate {
    pub(crate) fn new(window: Duration, threshold: f64) -> Self {
        let width = i64::try_from(window.as_millis() / BUCKETS as u128).unwrap_or(i64::MAX);
        Self {
            threshold,
            width: width.max(1),
            epoch: Instant::now(),
            window: Mutex::new(Window::default()),
        }
    }

    /// The number of the bucket of now.
    fn bucket(&self) -> i64 {
        let millis = Instant::now()
            .saturating_duration_since(self.epoch)
            .as_millis();
        i64::try_from(millis)
            .unwrap_or(i64::MAX)
            .div_euclid(self.width)
    }

    /// Counts one event; returns whether the gate is open afterwards.
    pub(crate) fn record(&self, failed: bool) -> bool {
        let now = self.bucket();
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        window.advance(now);
        let slot = usize::try_from(window.latest.rem_euclid(SPAN)).unwrap_or(0);
        if let Some(bucket) = window.buckets.get_mut(slot) {
            bucket.events += 1;
            bucket.failures += u64::from(failed);
        }
        window.total.events += 1;
        window.total.failures += u64::from(failed);
        let Counts { events, failures } = window.total;
        #[allow(
            clippy::cast_precision_loss,
            reason = "a rate needs no more than f64 gives"
        )]
        let rate = failures as f64 / events as f64;
        events < MIN_EVENTS || rate <= self.threshold
    }
}

#[cfg(test)]
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss,
    reason = "test times and counts are small"
)]
mod tests {
    use super::{Gate, MIN_EVENTS};
    use proptest::prelude::*;
    use std::time::Duration;

    const WINDOW: Duration = Duration::from_secs(300);

    proptest! {
        /// Against a model that keeps every event with its time: the gate
        /// is open exactly when the events of the last window (to bucket
        /// precision) are too few or fail at most at the threshold.
        #[test]
        fn opens_and_closes_with_the_windowed_rate(
            steps in proptest::collection::vec((0u64..40_000, any::<bool>()), 1..200),
            threshold in 0.0f64..=1.0,
        ) {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            rt.block_on(async {
                let gate = Gate::new(WINDOW, threshold);
                let width = WINDOW.as_millis() as u64 / super::BUCKETS as u64;
                let mut seen: Vec<(u64, bool)> = Vec::new();
                // Buckets count from the gate's creation.
                let start = tokio::time::Instant::now();
                for (advance, failed) in steps {
                    tokio::time::advance(Duration::from_millis(advance)).await;
                    let now = (tokio::time::Instant::now() - start).as_millis() as u64;
                    seen.push((now / width, failed));
                    let current = now / width;
                    let live: Vec<bool> = seen.iter()
                        .filter(|(bucket, _)| bucket + super::BUCKETS as u64 > current)
                        .map(|(_, failed)| *failed)
                        .collect();
                    let events = live.len() as u64;
                    let failures = live.iter().filter(|f| **f).count() as f64;
                    let open = events < MIN_EVENTS || failures / events as f64 <= threshold;
                    prop_assert_eq!(gate.record(failed), open, "at {} ms", now);
                }
                Ok(())
            })?;
        }
    }
}
