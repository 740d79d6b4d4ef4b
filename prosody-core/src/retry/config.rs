//! Retry configuration.

use crate::Backoff;
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

    /// The delays before each retry: from `base`, doubling, capped at
    /// `max_delay`, each [jittered](Backoff::jittered) by the key and retry
    /// ([`Backoff::jitter`]).
    #[must_use]
    pub fn backoff(&self) -> Backoff {
        Backoff::new(self.base, self.max_delay)
    }
}
