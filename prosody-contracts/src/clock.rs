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
    at(tokio::time::Instant::now())
}

/// The wall-clock time of `instant` (a reading of tokio's clock), on the
/// same scale as [`now`]: a caller that holds a reading stamps it without
/// reading the clock again.
#[must_use]
pub fn at(instant: tokio::time::Instant) -> Timestamp {
    let anchor = anchor();
    let instant = instant.into_std();
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
    use super::{at, now};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn follows_the_paused_clock() {
        let before = now();
        tokio::time::sleep(Duration::from_secs(90)).await;
        let after = now();
        assert_eq!(after.as_millis() - before.as_millis(), 90_000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reading_stamps_as_now_did_when_it_was_taken() {
        let reading = tokio::time::Instant::now();
        let stamped = now();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        assert_eq!(at(reading), stamped);
        assert_eq!(at(tokio::time::Instant::now()), now());
        assert_eq!(now().as_millis() - at(reading).as_millis(), 1_500);
    }
}
