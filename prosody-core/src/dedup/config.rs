//! Dedup configuration.

use std::num::NonZeroUsize;
use std::time::Duration;

/// How messages are deduplicated.
///
/// Invariant (checked by [`DedupConfig::validate`]): `ttl` is at least a
/// second, since stores keep ttls in whole seconds. The type rules out an
/// empty cache: deduplication cannot be disabled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DedupConfig {
    /// Part of every dedup key; changing it makes every earlier record
    /// unknown (`idempotence_version`, default `"1"`).
    pub version: String,
    /// Dedup keys kept in memory, shared by all partitions of the process
    /// (`idempotence_cache_size`, default 8192).
    pub cache_size: NonZeroUsize,
    /// How long the store keeps a dedup key (`idempotence_ttl`, default 7
    /// days).
    pub ttl: Duration,
}

impl Default for DedupConfig {
    fn default() -> Self {
        Self {
            version: "1".to_owned(),
            cache_size: NonZeroUsize::new(8192).unwrap_or(NonZeroUsize::MIN),
            ttl: Duration::from_secs(7 * 24 * 60 * 60),
        }
    }
}

/// A dedup setting that breaks its rule; the message names the option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("option `{option}` is invalid: {reason}")]
pub struct DedupConfigError {
    /// The option.
    pub option: &'static str,
    /// The rule it breaks.
    pub reason: String,
}

impl DedupConfig {
    /// Checks the invariant.
    pub fn validate(&self) -> Result<(), DedupConfigError> {
        if self.ttl < Duration::from_secs(1) {
            return Err(DedupConfigError {
                option: "idempotence_ttl",
                reason: format!("{:?} is shorter than one second", self.ttl),
            });
        }
        Ok(())
    }
}
