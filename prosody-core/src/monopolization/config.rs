//! Monopolization configuration.

use std::num::NonZeroUsize;
use std::time::Duration;

/// How hot keys are detected.
///
/// Invariant (checked by [`MonopolizationConfig::validate`]): `threshold`
/// is within `0..=1` and `window` is longer than zero.
#[derive(Clone, Debug, PartialEq)]
pub struct MonopolizationConfig {
    /// Whether hot keys are rejected at all (`monopolization_enabled`,
    /// default `true`); disabled, the layer passes every call through.
    pub enabled: bool,
    /// The fraction of a window a key's handler calls may take before the
    /// key is rejected (`monopolization_threshold`, default 0.9).
    pub threshold: f64,
    /// The length of a measurement window (`monopolization_window`, default
    /// 5 minutes).
    pub window: Duration,
    /// Keys tracked at once (`monopolization_cache_size`, default 8192).
    pub cache_size: NonZeroUsize,
}

impl Default for MonopolizationConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold: 0.9,
            window: Duration::from_secs(300),
            cache_size: NonZeroUsize::new(8192).unwrap_or(NonZeroUsize::MIN),
        }
    }
}

/// A monopolization setting that breaks its rule; the message names the
/// option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("option `{option}` is invalid: {reason}")]
pub struct MonopolizationConfigError {
    /// The option.
    pub option: &'static str,
    /// The rule it breaks.
    pub reason: String,
}

impl MonopolizationConfig {
    /// Checks the invariant.
    pub fn validate(&self) -> Result<(), MonopolizationConfigError> {
        // Zero would turn every key away after its first call of a window.
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return Err(MonopolizationConfigError {
                option: "monopolization_threshold",
                reason: format!("{} is not within (0, 1]", self.threshold),
            });
        }
        if self.window.is_zero() {
            return Err(MonopolizationConfigError {
                option: "monopolization_window",
                reason: "got 0s; must be longer than zero".to_owned(),
            });
        }
        Ok(())
    }

    /// The handler time a key may use per window: `threshold * window`,
    /// with the threshold clamped to `0..=1` (a NaN counts as 1).
    #[must_use]
    pub fn budget(&self) -> Duration {
        let threshold = if self.threshold.is_nan() {
            1.0
        } else {
            self.threshold.clamp(0.0, 1.0)
        };
        Duration::try_from_secs_f64(self.window.as_secs_f64() * threshold).unwrap_or(self.window)
    }
}
