//! Options of the mode and its quality-of-service stages.

use super::{ConfigError, Values};
use prosody_core::RuntimeConfig;
use prosody_core::dedup::DedupConfig;
use prosody_core::defer::DeferConfig;
use prosody_core::event::Topic;
use prosody_core::failure::FailureConfig;
use prosody_core::loader::LoaderConfig;
use prosody_core::monopolization::MonopolizationConfig;
use prosody_core::retry::RetryConfig;
use prosody_core::scheduler::SchedulerConfig;
use prosody_core::timeout::TimeoutConfig;
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

impl Values {
    /// The stages of `mode`, over the consumer's retry settings.
    pub(super) fn qos(&self, mode: Mode, runtime: &RuntimeConfig) -> Result<Qos, ConfigError> {
        if mode == Mode::LowLatency && self.failure_topic.is_none() {
            return Err(ConfigError::Missing {
                option: "failure_topic",
                variable: "PROSODY_FAILURE_TOPIC",
            });
        }
        let stall_threshold = self.stall_threshold;
        let timeout = match self.timeout {
            Some(timeout) => {
                let timeout = TimeoutConfig { timeout };
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
        Ok(Qos {
            mode,
            retry: RetryConfig {
                base: runtime.retry_base,
                max_delay: runtime.max_retry_delay,
                max_retries: None,
            },
            max_retries: self.max_retries,
            failure: self.failure_topic.as_ref().map(|topic| FailureConfig {
                topic: Arc::from(topic.as_str()),
                send_timeout: self.send_timeout,
            }),
            timeout,
            dedup: checked!(DedupConfig {
                version: self.idempotence_version.clone(),
                cache_size: self.idempotence_cache_size,
                ttl: self.idempotence_ttl,
            }),
            monopolization: checked!(MonopolizationConfig {
                enabled: self.monopolization_enabled,
                threshold: self.monopolization_threshold,
                window: self.monopolization_window,
                cache_size: self.monopolization_cache_size,
            }),
            scheduler: checked!(SchedulerConfig {
                max_concurrency: self.max_concurrency,
                failure_weight: self.scheduler_failure_weight,
                max_wait: self.scheduler_max_wait,
                wait_weight: self.scheduler_wait_weight,
                cache_size: self.scheduler_cache_size,
            }),
            defer: checked!(DeferConfig {
                enabled: self.defer_enabled,
                base: self.defer_base,
                max_delay: self.defer_max_delay,
                failure_threshold: self.defer_failure_threshold,
                failure_window: self.defer_failure_window,
            }),
            loader: LoaderConfig {
                cache_size: self.loader_cache_size,
                seek_timeout: self.loader_seek_timeout,
                discard_threshold: self.loader_discard_threshold.get(),
            },
            stall_threshold,
            telemetry: self
                .telemetry_enabled
                .then(|| Topic::from(self.telemetry_topic.clone())),
        })
    }
}
