//! Timeout configuration.

use std::time::Duration;

/// The stall threshold of the configuration tables (`stall_threshold`).
pub const DEFAULT_STALL_THRESHOLD: Duration = Duration::from_secs(300);

/// How long one attempt may run.
///
/// Invariant: `timeout` is positive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeoutConfig {
    /// The deadline of one attempt (`timeout`, default 80% of the stall
    /// threshold: 4m).
    pub timeout: Duration,
}

/// The longest grace an attempt gets after its deadline.
pub const MAX_GRACE: Duration = Duration::from_secs(10);

impl TimeoutConfig {
    /// How long an attempt may still take to return once its deadline has
    /// passed and it sees cancellation: a tenth of `timeout`, at most
    /// [`MAX_GRACE`]. After that it is dropped.
    #[must_use]
    pub fn grace(&self) -> Duration {
        (self.timeout / 10).min(MAX_GRACE)
    }

    /// 80% of a stall threshold, the default deadline.
    #[must_use]
    pub fn from_stall_threshold(stall_threshold: Duration) -> Self {
        Self {
            timeout: stall_threshold.mul_f64(0.8),
        }
    }
}

impl Default for TimeoutConfig {
    fn default() -> Self {
        Self::from_stall_threshold(DEFAULT_STALL_THRESHOLD)
    }
}
