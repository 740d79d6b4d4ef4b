//! Wall-clock time derived from tokio's clock.
//!
//! All time in the library flows through tokio, so a test that pauses the
//! tokio clock also freezes and advances the timestamps the library stamps
//! on records and timers.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
///
/// Invariant: values read from [`now`] never go backwards within one
/// process, because they are an anchor plus tokio's monotonic clock.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// A timestamp from milliseconds since the Unix epoch.
    #[must_use]
    pub const fn from_millis(millis: i64) -> Self {
        Self(millis)
    }

    /// Milliseconds since the Unix epoch.
    #[must_use]
    pub const fn as_millis(self) -> i64 {
        self.0
    }
}

struct Anchor {
    wall_millis: i64,
    instant: std::time::Instant,
}

fn anchor() -> &'static Anchor {
    static ANCHOR: OnceLock<Anchor> = OnceLock::new();
    ANCHOR.get_or_init(|| Anchor {
        wall_millis: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        instant: std::time::Instant::now(),
    })
}

fn nanos(duration: Duration) -> i128 {
    i128::try_from(duration.as_nanos()).unwrap_or(i128::MAX)
}

/// The current wall-clock time, as seen through tokio's clock.
///
/// Outside a runtime this is the process anchor plus real elapsed time.
#[must_use]
pub fn now() -> Timestamp {
    let anchor = anchor();
    let instant = tokio::time::Instant::now().into_std();
    let offset_nanos = match instant.checked_duration_since(anchor.instant) {
        Some(ahead) => nanos(ahead),
        None => -nanos(anchor.instant.duration_since(instant)),
    };
    // Floor division, so readings on either side of the anchor round alike.
    let offset = i64::try_from(offset_nanos.div_euclid(1_000_000)).unwrap_or(i64::MAX);
    Timestamp(anchor.wall_millis.saturating_add(offset))
}

#[cfg(test)]
mod tests {
    use super::now;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn follows_the_paused_clock() {
        let before = now();
        tokio::time::sleep(Duration::from_secs(90)).await;
        let after = now();
        assert_eq!(after.as_millis() - before.as_millis(), 90_000);
    }
}
