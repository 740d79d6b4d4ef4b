//! The meter of an event's waits for scheduler permits.

use super::event::EventWork;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long an event's attempts waited for scheduler permits: the
/// scheduler adds to it, and stages above the scheduler read it to tell
/// waiting from running (monopolization counts only running).
///
/// Invariant: only grows; clones share one count. A request the runtime
/// made meters into its event's unit of work, so metering costs no
/// allocation; [`WaitMeter::default`] makes a meter of its own.
#[derive(Clone, Debug)]
pub struct WaitMeter(Meter);

#[derive(Clone, Debug)]
enum Meter {
    Own(Arc<AtomicU64>),
    Event(Arc<EventWork>),
}

impl Default for WaitMeter {
    fn default() -> Self {
        Self(Meter::Own(Arc::default()))
    }
}

impl WaitMeter {
    /// The meter kept in an event's unit of work.
    pub(super) fn of_event(event: Arc<EventWork>) -> Self {
        Self(Meter::Event(event))
    }

    fn nanos(&self) -> &AtomicU64 {
        match &self.0 {
            Meter::Own(nanos) => nanos,
            Meter::Event(event) => &event.waited,
        }
    }

    /// Adds a wait.
    pub fn add(&self, waited: Duration) {
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.nanos().fetch_add(nanos, Ordering::Relaxed);
    }

    /// The total waited so far.
    #[must_use]
    pub fn waited(&self) -> Duration {
        Duration::from_nanos(self.nanos().load(Ordering::Relaxed))
    }
}
