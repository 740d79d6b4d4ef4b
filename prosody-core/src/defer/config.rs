//! Defer configuration.

use crate::Backoff;
use std::time::Duration;

/// How the defer stage sets failing events aside.
///
/// Invariant (checked by [`DeferConfig::validate`]): `base` is positive,
/// `max_delay >= base`, `failure_threshold` lies in `0..=1` and
/// `failure_window` is positive.
#[derive(Clone, Debug, PartialEq)]
pub struct DeferConfig {
    /// Whether new failures are deferred (`defer_enabled`, default true).
    /// Switched off, keys already deferred still drain in order; new
    /// failures go to the retry stage.
    pub enabled: bool,
    /// The delay before the first retry of a deferred event (`defer_base`,
    /// default 1s); each failed retry doubles it.
    pub base: Duration,
    /// The longest delay between retries (`defer_max_delay`, default 24h).
    pub max_delay: Duration,
    /// Above this share of failing events, new failures are not deferred
    /// (`defer_failure_threshold`, default 0.9).
    pub failure_threshold: f64,
    /// The span over which that share is measured (`defer_failure_window`,
    /// default 5m).
    pub failure_window: Duration,
}

impl Default for DeferConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            base: Duration::from_secs(1),
            max_delay: Duration::from_secs(24 * 60 * 60),
            failure_threshold: 0.9,
            failure_window: Duration::from_secs(5 * 60),
        }
    }
}

/// A defer setting that breaks its rule; the message names the option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("option `{option}` is invalid: {reason}")]
pub struct DeferConfigError {
    /// The option.
    pub option: &'static str,
    /// The rule it breaks.
    pub reason: String,
}

impl DeferConfig {
    /// Checks the invariant.
    pub fn validate(&self) -> Result<(), DeferConfigError> {
        let fail = |option, reason: String| Err(DeferConfigError { option, reason });
        if self.base.is_zero() {
            return fail("defer_base", "got 0s; must be longer than zero".to_owned());
        }
        if self.max_delay < self.base {
            let reason = format!(
                "{:?} is shorter than defer_base {:?}",
                self.max_delay, self.base
            );
            return fail("defer_max_delay", reason);
        }
        if !(0.0..=1.0).contains(&self.failure_threshold) {
            let reason = format!("{} is outside 0..=1", self.failure_threshold);
            return fail("defer_failure_threshold", reason);
        }
        if self.failure_window.is_zero() {
            return fail(
                "defer_failure_window",
                "got 0s; must be longer than zero".to_owned(),
            );
        }
        Ok(())
    }

    /// The delays after an event's failures: from `base`, doubling,
    /// capped at `max_delay` (`backoff().delay(n)` after failure `n`).
    #[must_use]
    pub fn backoff(&self) -> Backoff {
        Backoff::new(self.base, self.max_delay)
    }
}
