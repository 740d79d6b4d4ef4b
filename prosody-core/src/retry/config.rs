//! Retry configuration.

use std::time::Duration;

/// How a failed attempt is tried again.
///
/// Invariant (checked by [`RetryConfig::validate`]): `base` is positive and
/// `max_delay >= base`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryConfig {
    /// The delay before the first retry (`retry_base`, default 20ms).
    pub base: Duration,
    /// The longest delay (`max_retry_delay`, default 5m).
    pub max_delay: Duration,
    /// Retries after the first attempt; `None` retries forever (pipeline),
    /// low-latency uses `max_retries` (default 3).
    pub max_retries: Option<u32>,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(20),
            max_delay: Duration::from_secs(300),
            max_retries: None,
        }
    }
}

/// A retry setting that breaks its rule; the message names the option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("option `{option}` is invalid: {reason}")]
pub struct RetryConfigError {
    /// The option.
    pub option: &'static str,
    /// The rule it breaks.
    pub reason: String,
}

impl RetryConfig {
    /// Checks the invariant.
    pub fn validate(&self) -> Result<(), RetryConfigError> {
        if self.base.is_zero() {
            return Err(RetryConfigError {
                option: "retry_base",
                reason: "got 0s; must be longer than zero".to_owned(),
            });
        }
        if self.max_delay < self.base {
            return Err(RetryConfigError {
                option: "max_retry_delay",
                reason: format!(
                    "{:?} is shorter than retry_base {:?}",
                    self.max_delay, self.base
                ),
            });
        }
        Ok(())
    }

    /// The delay before retry number `retry` (from 1): `base * 2^(retry-1)`
    /// stretched by up to a quarter by `jitter` (in `0..1`), never above
    /// `max_delay`. Below the cap, delays never decrease as `retry` grows,
    /// whatever the jitter: doubling outgrows the largest stretch. At the
    /// cap the delay is `max_delay` shortened by up to a quarter, so keys
    /// failing together in a long outage do not retry in lockstep.
    #[must_use]
    pub fn delay(&self, retry: u32, jitter: f64) -> Duration {
        let factor = 1u32
            .checked_shl(retry.saturating_sub(1))
            .unwrap_or(u32::MAX);
        let exponential = self.base.saturating_mul(factor);
        if exponential >= self.max_delay {
            return self
                .max_delay
                .mul_f64(1.0 - 0.25 * jitter.clamp(0.0, 1.0))
                .max(self.base);
        }
        exponential
            .mul_f64(1.0 + 0.25 * jitter.clamp(0.0, 1.0))
            .min(self.max_delay)
    }
}
