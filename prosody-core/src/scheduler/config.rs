//! The scheduler's configuration and its defaults (the seeds' "Fair
//! Scheduling" table, plus `max_concurrency` from the "Consumer" table).

use std::fmt;
use std::num::NonZeroUsize;
use std::time::Duration;

/// Default of `max_concurrency`.
const DEFAULT_MAX_CONCURRENCY: usize = 32;
/// Default of `scheduler_failure_weight`.
const DEFAULT_FAILURE_WEIGHT: f64 = 0.3;
/// Default of `scheduler_max_wait`.
const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(120);
/// Default of `scheduler_wait_weight`.
const DEFAULT_WAIT_WEIGHT: f64 = 200.0;
/// Default of `scheduler_cache_size`.
const DEFAULT_CACHE_SIZE: usize = 8192;

/// How the fair scheduler shares handler concurrency.
///
/// [`Default`] gives the seeds' defaults. Call [`SchedulerConfig::validate`]
/// when the values come from a user: [`SchedulerLayer::new`] does not fail,
/// and replaces each value that validation rejects by its default.
///
/// [`SchedulerLayer::new`]: super::SchedulerLayer::new
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Handler calls running at once across every partition of a client
    /// (`max_concurrency`, default 32).
    pub max_concurrency: NonZeroUsize,
    /// The share of execution time the failure class gets when both classes
    /// wait (`scheduler_failure_weight`, default 0.3); normal work gets the
    /// rest. Between 0 and 1.
    pub failure_weight: f64,
    /// A call that has waited this long gets the full wait boost
    /// (`scheduler_max_wait`, default 2 minutes). Longer than zero. Half of
    /// it is also the half-life of virtual time.
    pub max_wait: Duration,
    /// The full wait boost, in seconds of virtual time
    /// (`scheduler_wait_weight`, default 200). Finite and not negative.
    pub wait_weight: f64,
    /// How many keys' virtual times are remembered
    /// (`scheduler_cache_size`, default 8192).
    pub cache_size: NonZeroUsize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_concurrency: NonZeroUsize::new(DEFAULT_MAX_CONCURRENCY)
                .unwrap_or(NonZeroUsize::MIN),
            failure_weight: DEFAULT_FAILURE_WEIGHT,
            max_wait: DEFAULT_MAX_WAIT,
            wait_weight: DEFAULT_WAIT_WEIGHT,
            cache_size: NonZeroUsize::new(DEFAULT_CACHE_SIZE).unwrap_or(NonZeroUsize::MIN),
        }
    }
}

/// A scheduler option whose value breaks its rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidOption {
    /// The option's name in the configuration tables, such as
    /// `scheduler_failure_weight`.
    pub option: &'static str,
    /// The rule the value breaks.
    pub reason: String,
}

impl fmt::Display for InvalidOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "option `{}` is invalid: {}", self.option, self.reason)
    }
}

impl std::error::Error for InvalidOption {}

fn failure_weight_ok(value: f64) -> bool {
    (0.0..=1.0).contains(&value)
}

fn wait_weight_ok(value: f64) -> bool {
    value.is_finite() && value >= 0.0
}

impl SchedulerConfig {
    /// Checks the values the types allow but the scheduler does not, naming
    /// the first offending option.
    pub fn validate(&self) -> Result<(), InvalidOption> {
        if !failure_weight_ok(self.failure_weight) {
            return Err(InvalidOption {
                option: "scheduler_failure_weight",
                reason: format!("must be between 0 and 1, got {}", self.failure_weight),
            });
        }
        if !wait_weight_ok(self.wait_weight) {
            return Err(InvalidOption {
                option: "scheduler_wait_weight",
                reason: format!("must be finite and not negative, got {}", self.wait_weight),
            });
        }
        if self.max_wait.is_zero() {
            return Err(InvalidOption {
                option: "scheduler_max_wait",
                reason: "got 0s; must be longer than zero".to_owned(),
            });
        }
        Ok(())
    }

    /// The configuration with every value [`SchedulerConfig::validate`]
    /// rejects replaced by its default.
    pub(crate) fn sanitized(mut self) -> Self {
        if !failure_weight_ok(self.failure_weight) {
            self.failure_weight = DEFAULT_FAILURE_WEIGHT;
        }
        if !wait_weight_ok(self.wait_weight) {
            self.wait_weight = DEFAULT_WAIT_WEIGHT;
        }
        if self.max_wait.is_zero() {
            self.max_wait = DEFAULT_MAX_WAIT;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::SchedulerConfig;
    use std::time::Duration;

    #[test]
    fn defaults_follow_the_seed_tables() {
        let config = SchedulerConfig::default();
        assert_eq!(config.max_concurrency.get(), 32);
        assert!((config.failure_weight - 0.3).abs() < f64::EPSILON);
        assert_eq!(config.max_wait, Duration::from_secs(120));
        assert!((config.wait_weight - 200.0).abs() < f64::EPSILON);
        assert_eq!(config.cache_size.get(), 8192);
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn validation_names_the_offending_option() {
        let cases = [
            (
                SchedulerConfig {
                    failure_weight: 1.5,
                    ..SchedulerConfig::default()
                },
                "scheduler_failure_weight",
            ),
            (
                SchedulerConfig {
                    failure_weight: f64::NAN,
                    ..SchedulerConfig::default()
                },
                "scheduler_failure_weight",
            ),
            (
                SchedulerConfig {
                    wait_weight: -1.0,
                    ..SchedulerConfig::default()
                },
                "scheduler_wait_weight",
            ),
            (
                SchedulerConfig {
                    wait_weight: f64::INFINITY,
                    ..SchedulerConfig::default()
                },
                "scheduler_wait_weight",
            ),
            (
                SchedulerConfig {
                    max_wait: Duration::ZERO,
                    ..SchedulerConfig::default()
                },
                "scheduler_max_wait",
            ),
        ];
        for (config, option) in cases {
            let error = config.clone().validate().expect_err("invalid");
            assert_eq!(error.option, option);
            assert!(error.to_string().contains(option));
            assert_eq!(config.sanitized().validate(), Ok(()));
        }
        let edges = SchedulerConfig {
            failure_weight: 0.0,
            wait_weight: 0.0,
            ..SchedulerConfig::default()
        };
        assert_eq!(edges.validate(), Ok(()));
    }
}
