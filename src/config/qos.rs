//! Options of the mode and its quality-of-service stages.

use super::{ConfigError, non_empty, positive_duration, positive_size};
use crate::env::Env;
use prosody_core::RuntimeConfig;
use prosody_core::dedup::DedupConfig;
use prosody_core::defer::DeferConfig;
use prosody_core::event::Topic;
use prosody_core::failure::FailureConfig;
use prosody_core::loader::LoaderConfig;
use prosody_core::monopolization::MonopolizationConfig;
use prosody_core::retry::RetryConfig;
use prosody_core::scheduler::SchedulerConfig;
use prosody_core::timeout::{DEFAULT_STALL_THRESHOLD, TimeoutConfig};
use std::sync::Arc;
use std::time::Duration;

/// How failures are handled: each mode is a preset of the stage stack.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Retry forever; a key that fails or monopolizes is set aside (deferred)
    /// so the partition moves on. Stack: dedup, retry (forever), defer,
    /// monopolization, shutdown, scheduler, timeout, telemetry.
    #[default]
    Pipeline,
    /// A few retries, then the record goes to `failure_topic` (required).
    /// Stack: dedup, retry (forever, for the failure-topic send), failure
    /// topic, retry (`max_retries`), shutdown, scheduler, timeout, telemetry.
    LowLatency,
    /// Log a failure and move on. Stack: dedup, log, shutdown, scheduler,
    /// timeout, telemetry.
    BestEffort,
}

/// The builder's quality-of-service options; `None` falls back to the environment, then
/// the default.
#[derive(Clone, Debug, Default)]
pub(crate) struct QosOptions {
    pub(crate) mode: Option<Mode>,
    pub(crate) max_concurrency: Option<usize>,
    pub(crate) max_retries: Option<usize>,
    pub(crate) failure_topic: Option<String>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) stall_threshold: Option<Duration>,
    pub(crate) idempotence_version: Option<String>,
    pub(crate) idempotence_cache_size: Option<usize>,
    pub(crate) idempotence_ttl: Option<Duration>,
    pub(crate) monopolization_enabled: Option<bool>,
    pub(crate) monopolization_threshold: Option<f64>,
    pub(crate) monopolization_window: Option<Duration>,
    pub(crate) monopolization_cache_size: Option<usize>,
    pub(crate) scheduler_failure_weight: Option<f64>,
    pub(crate) scheduler_max_wait: Option<Duration>,
    pub(crate) scheduler_wait_weight: Option<f64>,
    pub(crate) scheduler_cache_size: Option<usize>,
    pub(crate) telemetry_topic: Option<String>,
    pub(crate) telemetry_enabled: Option<bool>,
    pub(crate) defer_enabled: Option<bool>,
    pub(crate) defer_base: Option<Duration>,
    pub(crate) defer_max_delay: Option<Duration>,
    pub(crate) defer_failure_threshold: Option<f64>,
    pub(crate) defer_failure_window: Option<Duration>,
    pub(crate) loader_cache_size: Option<usize>,
    pub(crate) loader_seek_timeout: Option<Duration>,
    pub(crate) loader_discard_threshold: Option<usize>,
}

/// The resolved stages.
///
/// Invariant: every configuration satisfies its rule, and low-latency mode
/// has a failure topic.
#[derive(Clone, Debug)]
pub(crate) struct Qos {
    pub(crate) mode: Mode,
    /// Pipeline's retry (forever); low-latency's inner retry takes
    /// `max_retries` from [`Qos::max_retries`].
    pub(crate) retry: RetryConfig,
    pub(crate) max_retries: u32,
    pub(crate) failure: Option<FailureConfig>,
    pub(crate) timeout: TimeoutConfig,
    pub(crate) dedup: DedupConfig,
    pub(crate) monopolization: MonopolizationConfig,
    pub(crate) scheduler: SchedulerConfig,
    pub(crate) defer: DeferConfig,
    pub(crate) loader: LoaderConfig,
    /// No progress for this long, with work pending, is a stall.
    pub(crate) stall_threshold: Duration,
    /// The topic of lifecycle events, `None` when telemetry is disabled.
    /// Mock mode emits none whatever this says.
    pub(crate) telemetry: Option<Topic>,
}

/// Maps a stage's own validation error to the client's.
macro_rules! checked {
    ($config:expr) => {{
        let config = $config;
        config.validate().map_err(|e| ConfigError::Invalid {
            option: e.option,
            reason: e.reason,
        })?;
        config
    }};
}

impl QosOptions {
    pub(crate) fn resolve<F: Fn(&str) -> Option<String>>(
        &self,
        env: &Env<F>,
        runtime: &RuntimeConfig,
        send_timeout: Duration,
    ) -> Result<Qos, ConfigError> {
        let mode = self.mode.unwrap_or_default();
        let max_retries = env.layer(self.max_retries, "PROSODY_MAX_RETRIES", || 3)?;
        let max_retries = u32::try_from(max_retries).map_err(|_| ConfigError::Invalid {
            option: "max_retries",
            reason: format!("{max_retries} is too large"),
        })?;
        let failure_topic = match self.failure_topic.clone() {
            Some(topic) => Some(topic),
            None => env.read::<String>("PROSODY_FAILURE_TOPIC")?,
        };
        let failure_topic = failure_topic
            .map(|topic| non_empty("failure_topic", topic))
            .transpose()?;
        if mode == Mode::LowLatency && failure_topic.is_none() {
            return Err(ConfigError::Missing {
                option: "failure_topic",
                variable: "PROSODY_FAILURE_TOPIC",
            });
        }
        let stall_threshold = positive_duration(
            "stall_threshold",
            env.layer(self.stall_threshold, "PROSODY_STALL_THRESHOLD", || {
                DEFAULT_STALL_THRESHOLD
            })?,
        )?;
        let timeout = match self.timeout {
            Some(timeout) => Some(timeout),
            None => env.read::<Duration>("PROSODY_TIMEOUT")?,
        };
        let timeout = match timeout {
            Some(timeout) => {
                let timeout = TimeoutConfig {
                    timeout: positive_duration("timeout", timeout)?,
                };
                // A handler may run for its grace past the deadline; that
                // must not already count as a stall.
                if timeout.timeout + timeout.grace() >= stall_threshold {
                    return Err(ConfigError::Invalid {
                        option: "timeout",
                        reason: format!(
                            "{} plus its grace of {} is not below stall_threshold {}",
                            super::shown(timeout.timeout),
                            super::shown(timeout.grace()),
                            super::shown(stall_threshold)
                        ),
                    });
                }
                timeout
            }
            None => TimeoutConfig::from_stall_threshold(stall_threshold),
        };
        let telemetry_topic = non_empty(
            "telemetry_topic",
            env.layer(
                self.telemetry_topic.clone(),
                "PROSODY_TELEMETRY_TOPIC",
                || "prosody.telemetry-events".to_owned(),
            )?,
        )?;
        let telemetry = env
            .layer(self.telemetry_enabled, "PROSODY_TELEMETRY_ENABLED", || true)?
            .then(|| Topic::from(telemetry_topic));
        Ok(Qos {
            mode,
            retry: RetryConfig {
                base: runtime.retry_base,
                max_delay: runtime.max_retry_delay,
                max_retries: None,
            },
            max_retries,
            failure: failure_topic.map(|topic| FailureConfig {
                topic: Arc::from(topic),
                send_timeout,
            }),
            timeout,
            dedup: checked!(self.dedup(env)?),
            monopolization: checked!(self.monopolization(env)?),
            scheduler: checked!(self.scheduler(env)?),
            defer: checked!(self.defer(env)?),
            loader: self.loader(env)?,
            stall_threshold,
            telemetry,
        })
    }

    fn defer<F: Fn(&str) -> Option<String>>(
        &self,
        env: &Env<F>,
    ) -> Result<DeferConfig, ConfigError> {
        let defaults = DeferConfig::default();
        Ok(DeferConfig {
            enabled: env.layer(self.defer_enabled, "PROSODY_DEFER_ENABLED", || {
                defaults.enabled
            })?,
            base: env.layer(self.defer_base, "PROSODY_DEFER_BASE", || defaults.base)?,
            max_delay: env.layer(self.defer_max_delay, "PROSODY_DEFER_MAX_DELAY", || {
                defaults.max_delay
            })?,
            failure_threshold: env.layer(
                self.defer_failure_threshold,
                "PROSODY_DEFER_FAILURE_THRESHOLD",
                || defaults.failure_threshold,
            )?,
            failure_window: env.layer(
                self.defer_failure_window,
                "PROSODY_DEFER_FAILURE_WINDOW",
                || defaults.failure_window,
            )?,
        })
    }

    fn loader<F: Fn(&str) -> Option<String>>(
        &self,
        env: &Env<F>,
    ) -> Result<LoaderConfig, ConfigError> {
        let defaults = LoaderConfig::default();
        Ok(LoaderConfig {
            cache_size: positive_size(
                "loader_cache_size",
                env.layer(self.loader_cache_size, "PROSODY_LOADER_CACHE_SIZE", || {
                    defaults.cache_size.get()
                })?,
            )?,
            seek_timeout: positive_duration(
                "loader_seek_timeout",
                env.layer(
                    self.loader_seek_timeout,
                    "PROSODY_LOADER_SEEK_TIMEOUT",
                    || defaults.seek_timeout,
                )?,
            )?,
            discard_threshold: positive_size(
                "loader_discard_threshold",
                env.layer(
                    self.loader_discard_threshold,
                    "PROSODY_LOADER_DISCARD_THRESHOLD",
                    || defaults.discard_threshold,
                )?,
            )?
            .get(),
        })
    }

    fn dedup<F: Fn(&str) -> Option<String>>(
        &self,
        env: &Env<F>,
    ) -> Result<DedupConfig, ConfigError> {
        let defaults = DedupConfig::default();
        Ok(DedupConfig {
            version: non_empty(
                "idempotence_version",
                env.layer(
                    self.idempotence_version.clone(),
                    "PROSODY_IDEMPOTENCE_VERSION",
                    || defaults.version.clone(),
                )?,
            )?,
            cache_size: positive_size(
                "idempotence_cache_size",
                env.layer(
                    self.idempotence_cache_size,
                    "PROSODY_IDEMPOTENCE_CACHE_SIZE",
                    || defaults.cache_size.get(),
                )?,
            )?,
            ttl: env.layer(self.idempotence_ttl, "PROSODY_IDEMPOTENCE_TTL", || {
                defaults.ttl
            })?,
        })
    }

    fn monopolization<F: Fn(&str) -> Option<String>>(
        &self,
        env: &Env<F>,
    ) -> Result<MonopolizationConfig, ConfigError> {
        let defaults = MonopolizationConfig::default();
        Ok(MonopolizationConfig {
            enabled: env.layer(
                self.monopolization_enabled,
                "PROSODY_MONOPOLIZATION_ENABLED",
                || defaults.enabled,
            )?,
            threshold: env.layer(
                self.monopolization_threshold,
                "PROSODY_MONOPOLIZATION_THRESHOLD",
                || defaults.threshold,
            )?,
            window: env.layer(
                self.monopolization_window,
                "PROSODY_MONOPOLIZATION_WINDOW",
                || defaults.window,
            )?,
            cache_size: positive_size(
                "monopolization_cache_size",
                env.layer(
                    self.monopolization_cache_size,
                    "PROSODY_MONOPOLIZATION_CACHE_SIZE",
                    || defaults.cache_size.get(),
                )?,
            )?,
        })
    }

    fn scheduler<F: Fn(&str) -> Option<String>>(
        &self,
        env: &Env<F>,
    ) -> Result<SchedulerConfig, ConfigError> {
        let defaults = SchedulerConfig::default();
        Ok(SchedulerConfig {
            max_concurrency: positive_size(
                "max_concurrency",
                env.layer(self.max_concurrency, "PROSODY_MAX_CONCURRENCY", || {
                    defaults.max_concurrency.get()
                })?,
            )?,
            failure_weight: env.layer(
                self.scheduler_failure_weight,
                "PROSODY_SCHEDULER_FAILURE_WEIGHT",
                || defaults.failure_weight,
            )?,
            max_wait: env.layer(
                self.scheduler_max_wait,
                "PROSODY_SCHEDULER_MAX_WAIT",
                || defaults.max_wait,
            )?,
            wait_weight: env.layer(
                self.scheduler_wait_weight,
                "PROSODY_SCHEDULER_WAIT_WEIGHT",
                || defaults.wait_weight,
            )?,
            cache_size: positive_size(
                "scheduler_cache_size",
                env.layer(
                    self.scheduler_cache_size,
                    "PROSODY_SCHEDULER_CACHE_SIZE",
                    || defaults.cache_size.get(),
                )?,
            )?,
        })
    }
}
