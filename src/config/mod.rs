//! The client's options: set on the builder, else read from `PROSODY_*`
//! environment variables, else the documented default.

mod cassandra;
mod kafka;
mod observe;
mod qos;
mod state;

pub(crate) use cassandra::Cassandra;
pub use cassandra::Secret;
pub(crate) use kafka::Kafka;
pub use kafka::{GroupProtocol, SaslMechanism, SecurityProtocol};
pub(crate) use observe::Observe;
pub use observe::{ProbePort, SpanLink};
pub use qos::Mode;
pub(crate) use qos::Qos;

use crate::env::Env;
use prosody_core::RuntimeConfig;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

/// An option that is missing or out of range; the message names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required option is not set.
    #[error("option `{option}` is required (builder `{option}(...)` or {variable})")]
    Missing {
        /// The option.
        option: &'static str,
        /// Its environment variable.
        variable: &'static str,
    },
    /// An option's value breaks its rule.
    #[error("option `{option}` is invalid: {reason}")]
    Invalid {
        /// The option.
        option: &'static str,
        /// The rule it breaks.
        reason: String,
    },
    /// An environment variable could not be parsed.
    #[error("environment variable {variable}={value:?} is invalid: {reason}")]
    Environment {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// Why it does not parse.
        reason: String,
    },
    /// On Kafka, no store was chosen that outlives the process.
    #[error(
        "on Kafka, timers and deferred records need a store that outlives the process: \
         set cassandra_nodes (PROSODY_CASSANDRA_NODES), give the builder stores(...), or \
         opt into memory_stores(true) (PROSODY_MEMORY_STORES), which loses them when the \
         process stops"
    )]
    NoDurableStore,
    /// Cassandra refused the client (its login, or a schema newer than
    /// this version knows), or did not answer within `connect_timeout`.
    #[error("Cassandra: {reason} (check cassandra_nodes and the cassandra options)")]
    Cassandra {
        /// What went wrong.
        reason: String,
        /// Whether trying again may help: `false` for a refused login or
        /// an unknown schema, `true` for nodes that did not answer.
        retriable: bool,
    },
    /// Kafka refused the client (its login or TLS handshake), or did not
    /// answer within `connect_timeout`.
    #[error("{reason} (check bootstrap_servers and the security options)")]
    Unreachable {
        /// What librdkafka last reported.
        reason: String,
        /// Whether trying again may help: `false` for a refused login or
        /// certificate, `true` for a cluster that did not answer.
        retriable: bool,
    },
    /// The store did not record the keyed-state collections' identities.
    #[error("recording the state collections' kinds in the store failed: {reason}")]
    StateStore {
        /// What the store said.
        reason: String,
        /// Whether trying again may help.
        retriable: bool,
    },
}

/// Options as given to the builder; `None` falls back to the environment,
/// then to the default.
#[derive(Clone, Debug, Default)]
pub(crate) struct Options {
    pub(crate) group_id: Option<String>,
    pub(crate) subscribed_topics: Option<Vec<String>>,
    pub(crate) bootstrap_servers: Option<Vec<String>>,
    pub(crate) source_system: Option<String>,
    pub(crate) allowed_events: Option<Vec<String>>,
    pub(crate) mock: Option<bool>,
    pub(crate) memory_stores: Option<bool>,
    pub(crate) max_uncommitted: Option<usize>,
    pub(crate) commit_interval: Option<Duration>,
    pub(crate) poll_interval: Option<Duration>,
    pub(crate) shutdown_timeout: Option<Duration>,
    pub(crate) send_timeout: Option<Duration>,
    pub(crate) retry_base: Option<Duration>,
    pub(crate) max_retry_delay: Option<Duration>,
    pub(crate) slab_size: Option<Duration>,
    pub(crate) qos: qos::QosOptions,
    pub(crate) observe: observe::ObserveOptions,
    pub(crate) cassandra: cassandra::CassandraOptions,
    pub(crate) kafka: kafka::KafkaOptions,
    pub(crate) state: state::StateOptions,
}

/// Where the client's broker is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cluster {
    /// The in-memory broker (mock mode).
    Mock,
    /// Kafka, reached through these servers (at least one).
    Kafka(Vec<String>),
}

/// Options after layering and validation.
///
/// Invariant: every value satisfies its rule (non-empty names, positive
/// sizes and durations, `max_retry_delay >= retry_base`).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) cluster: Cluster,
    /// `None` when the client only produces.
    pub(crate) subscribed_topics: Option<Vec<Arc<str>>>,
    pub(crate) source_system: Arc<str>,
    pub(crate) send_timeout: Duration,
    /// The consumer's settings, group id included.
    pub(crate) runtime: RuntimeConfig,
    /// The quality-of-service stages.
    pub(crate) qos: qos::Qos,
    /// Probes, statistics and span links.
    pub(crate) observe: Observe,
    /// The Cassandra stores' options (no nodes: none).
    pub(crate) cassandra: Cassandra,
    /// Whether a Kafka client without Cassandra may keep its stores in
    /// memory (they are lost when the process stops).
    pub(crate) memory_stores: bool,
    /// How the Kafka clients connect (unused in mock mode).
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub(crate) kafka: Kafka,
    /// The state owners' disk cache (Cassandra stores only).
    pub(crate) state_cache: state::CacheSettings,
}

/// A duration as the environment writes it (`5m`, `120ms`).
pub(crate) fn shown(duration: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(duration)
}

pub(crate) fn non_empty(option: &'static str, value: String) -> Result<String, ConfigError> {
    if value.trim().is_empty() {
        return Err(ConfigError::Invalid {
            option,
            reason: format!("got {value:?}; must not be empty"),
        });
    }
    Ok(value)
}

pub(crate) fn positive_size(
    option: &'static str,
    value: usize,
) -> Result<NonZeroUsize, ConfigError> {
    NonZeroUsize::new(value).ok_or_else(|| ConfigError::Invalid {
        option,
        reason: "got 0; must be at least 1".to_owned(),
    })
}

pub(crate) fn positive_duration(
    option: &'static str,
    value: Duration,
) -> Result<Duration, ConfigError> {
    if value.is_zero() {
        return Err(ConfigError::Invalid {
            option,
            reason: "got 0s; must be longer than zero".to_owned(),
        });
    }
    Ok(value)
}

impl Options {
    /// Layers builder, environment and defaults, then validates.
    pub(crate) fn resolve<F: Fn(&str) -> Option<String>>(
        mut self,
        env: &Env<F>,
    ) -> Result<Settings, ConfigError> {
        let group_id = match self.group_id.take() {
            Some(value) => value,
            None => env.read("PROSODY_GROUP_ID")?.ok_or(ConfigError::Missing {
                option: "group_id",
                variable: "PROSODY_GROUP_ID",
            })?,
        };
        let group_id = non_empty("group_id", group_id)?;
        let subscribed_topics = match self.subscribed_topics.take() {
            Some(topics) => Some(topics),
            None => env.read::<Vec<String>>("PROSODY_SUBSCRIBED_TOPICS")?,
        };
        let subscribed_topics = subscribed_topics
            .map(|topics| {
                if topics.is_empty() {
                    return Err(ConfigError::Invalid {
                        option: "subscribed_topics",
                        reason: "must name at least one topic".to_owned(),
                    });
                }
                topics
                    .into_iter()
                    .map(|t| non_empty("subscribed_topics", t).map(Arc::from))
                    .collect()
            })
            .transpose()?;
        let source_system =
            env.layer(self.source_system.take(), "PROSODY_SOURCE_SYSTEM", || {
                group_id.clone()
            })?;
        let source_system = non_empty("source_system", source_system)?;
        let allowed_events = env.layer(
            self.allowed_events.take(),
            "PROSODY_ALLOWED_EVENTS",
            Vec::new,
        )?;
        if allowed_events.iter().any(String::is_empty) {
            return Err(ConfigError::Invalid {
                option: "allowed_events",
                reason: format!("{allowed_events:?} has an empty prefix"),
            });
        }
        let mock = env.layer(self.mock, "PROSODY_MOCK", || false)?;
        let bootstrap = env.layer(
            self.bootstrap_servers.take(),
            "PROSODY_BOOTSTRAP_SERVERS",
            Vec::new,
        )?;
        let cluster = if mock {
            Cluster::Mock
        } else if bootstrap.is_empty() {
            return Err(ConfigError::Missing {
                option: "bootstrap_servers",
                variable: "PROSODY_BOOTSTRAP_SERVERS",
            });
        } else {
            let servers = bootstrap
                .into_iter()
                .map(|server| non_empty("bootstrap_servers", server))
                .collect::<Result<Vec<_>, _>>()?;
            Cluster::Kafka(servers)
        };
        let mut runtime = self.runtime(env, RuntimeConfig::new(group_id), allowed_events)?;
        let state_cache = self.state.cache(env)?;
        runtime.state = Arc::new(std::mem::take(&mut self.state).resolve(env)?);
        let send_timeout = positive_duration(
            "send_timeout",
            env.layer(self.send_timeout, "PROSODY_SEND_TIMEOUT", || {
                Duration::from_secs(1)
            })?,
        )?;
        let qos = self.qos.resolve(env, &runtime, send_timeout)?;
        Ok(Settings {
            cluster,
            subscribed_topics,
            source_system: Arc::from(source_system),
            send_timeout,
            runtime,
            qos,
            observe: self.observe.resolve(env)?,
            cassandra: self.cassandra.resolve(env)?,
            memory_stores: env.layer(self.memory_stores, "PROSODY_MEMORY_STORES", || false)?,
            kafka: self.kafka.resolve(env)?,
            state_cache,
        })
    }

    /// The consumer's limits over `defaults`, layered and validated.
    fn runtime<F: Fn(&str) -> Option<String>>(
        &self,
        env: &Env<F>,
        defaults: RuntimeConfig,
        allowed_events: Vec<String>,
    ) -> Result<RuntimeConfig, ConfigError> {
        let options = self;
        let retry_base = positive_duration(
            "retry_base",
            env.layer(options.retry_base, "PROSODY_RETRY_BASE", || {
                defaults.retry_base
            })?,
        )?;
        let max_retry_delay =
            env.layer(options.max_retry_delay, "PROSODY_RETRY_MAX_DELAY", || {
                defaults.max_retry_delay
            })?;
        if max_retry_delay < retry_base {
            return Err(ConfigError::Invalid {
                option: "max_retry_delay",
                reason: format!(
                    "{} is shorter than retry_base {}",
                    shown(max_retry_delay),
                    shown(retry_base)
                ),
            });
        }
        Ok(RuntimeConfig {
            allowed_events: Arc::from(allowed_events),
            max_uncommitted: positive_size(
                "max_uncommitted",
                env.layer(options.max_uncommitted, "PROSODY_MAX_UNCOMMITTED", || {
                    defaults.max_uncommitted.get()
                })?,
            )?,
            commit_interval: positive_duration(
                "commit_interval",
                env.layer(options.commit_interval, "PROSODY_COMMIT_INTERVAL", || {
                    defaults.commit_interval
                })?,
            )?,
            poll_interval: positive_duration(
                "poll_interval",
                env.layer(options.poll_interval, "PROSODY_POLL_INTERVAL", || {
                    defaults.poll_interval
                })?,
            )?,
            shutdown_timeout: positive_duration(
                "shutdown_timeout",
                env.layer(options.shutdown_timeout, "PROSODY_SHUTDOWN_TIMEOUT", || {
                    defaults.shutdown_timeout
                })?,
            )?,
            slab_size: positive_duration(
                "slab_size",
                env.layer(options.slab_size, "PROSODY_SLAB_SIZE", || {
                    defaults.slab_size
                })?,
            )?,
            retry_base,
            max_retry_delay,
            ..defaults
        })
    }
}

#[cfg(test)]
mod precedence;
#[cfg(test)]
mod tests;
