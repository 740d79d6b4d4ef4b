//! The meter of a call's waits for scheduler permits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long calls waited for scheduler permits: the scheduler adds to the
/// meter of each request that carries one, and stages above the scheduler
/// read it to tell waiting from running (monopolization counts only
/// running, with a meter per key).
///
/// Invariant: only grows; clones share one count.
#[derive(Clone, Debug, Default)]
pub struct WaitMeter(Arc<AtomicU64>);

impl WaitMeter {
    /// Adds a wait.
    pub fn add(&self, waited: Duration) {
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The total waited so far.
    #[must_use]
    pub fn waited(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}
