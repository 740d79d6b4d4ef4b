//! The client's options: set on the builder, else read from `PROSODY_*`
//! environment variables, else the documented default.

mod cassandra;
mod connect;
mod given;
pub use given::spec;
mod kafka;
mod observe;
mod peer;
pub(crate) use peer::{PeerSettings, default_interface};
mod qos;
mod rules;
pub(crate) mod schema;
mod state;
mod table;
mod unknown;
pub(crate) use unknown::warn_unknown;

pub(crate) use cassandra::Cassandra;
pub use cassandra::Secret;
pub(crate) use kafka::Kafka;
pub use kafka::{GroupProtocol, SaslMechanism, SecurityProtocol};
pub(crate) use observe::Observe;
pub use observe::{ProbePort, SpanLink};
pub use qos::Mode;
pub(crate) use qos::Qos;
pub use state::ReadTtl;
use table::Values;
pub(crate) use table::{Options, option_rows};

use crate::env::{Env, EnvError};
use prosody_core::RuntimeConfig;
use rules::non_empty;
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
    /// A name given to [`ClientBuilder::option`](crate::ClientBuilder::option)
    /// that is no option.
    #[error("unknown option `{option}`{}", nearest.map(|n| format!(" (did you mean `{n}`?)")).unwrap_or_default())]
    Unknown {
        /// The name given.
        option: String,
        /// The option nearest to it, if one is close.
        nearest: Option<&'static str>,
    },
    /// A value given to [`ClientBuilder::option`](crate::ClientBuilder::option)
    /// that its option cannot take.
    #[error("option `{option}` cannot be {value}: {reason}")]
    Given {
        /// The option.
        option: String,
        /// The value given, as JSON.
        value: String,
        /// Why it does not fit.
        reason: String,
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
    /// The state owners' disk cache (durable stores, or any once `state_cache_dir` is set).
    pub(crate) state_cache: state::CacheSettings,
    /// The readers of published collections.
    pub(crate) reads: state::ReadSettings,
    /// The subsystem answered, and the peer endpoint.
    pub(crate) peer: peer::PeerSettings,
}

/// A duration as the environment writes it (`5m`, `120ms`).
pub(crate) fn shown(duration: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(duration)
}

impl From<EnvError> for ConfigError {
    fn from(error: EnvError) -> Self {
        let EnvError {
            variable,
            value,
            reason,
        } = error;
        Self::Environment {
            variable,
            value,
            reason,
        }
    }
}

impl Options {
    /// Layers builder, environment and defaults, then validates.
    pub(crate) fn resolve<F: Fn(&str) -> Option<String>>(
        mut self,
        env: &Env<F>,
    ) -> Result<Settings, ConfigError> {
        let values = self.layer(env)?;
        let cluster = values.cluster()?;
        let mut runtime = values.runtime()?;
        runtime.state = Arc::new(values.registry(std::mem::take(&mut self.state_collections))?);
        let qos = values.qos(self.mode.unwrap_or_default(), &runtime)?;
        let cassandra = values.cassandra()?;
        let peer = values.peer();
        if !cassandra.nodes.is_empty() && peer.registration_ttl > cassandra.retention {
            return Err(ConfigError::Invalid {
                option: "peer_registration_ttl",
                reason: format!(
                    "{} is longer than cassandra_retention ({}), the longest a Cassandra row \
                     lives: the lease would run out before its renewal",
                    shown(peer.registration_ttl),
                    shown(cassandra.retention)
                ),
            });
        }
        Ok(Settings {
            cluster,
            subscribed_topics: values.subscribed_topics.clone(),
            source_system: Arc::from(
                values
                    .source_system
                    .clone()
                    .unwrap_or_else(|| values.group_id.clone()),
            ),
            send_timeout: values.send_timeout,
            runtime,
            qos,
            observe: values.observe(),
            cassandra,
            memory_stores: values.memory_stores,
            kafka: values.kafka()?,
            state_cache: values.cache(),
            reads: values.reads(),
            peer,
        })
    }
}

impl Values {
    /// Mock mode, or Kafka with at least one server.
    fn cluster(&self) -> Result<Cluster, ConfigError> {
        if self.mock {
            return Ok(Cluster::Mock);
        }
        let servers = self.bootstrap_servers.clone().unwrap_or_default();
        if servers.is_empty() {
            return Err(ConfigError::Missing {
                option: "bootstrap_servers",
                variable: "PROSODY_BOOTSTRAP_SERVERS",
            });
        }
        let servers = servers
            .into_iter()
            .map(|server| non_empty("bootstrap_servers", server))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Cluster::Kafka(servers))
    }

    /// The consumer's limits, over the core's defaults for what the
    /// options do not set.
    fn runtime(&self) -> Result<RuntimeConfig, ConfigError> {
        if self.max_retry_delay < self.retry_base {
            return Err(ConfigError::Invalid {
                option: "max_retry_delay",
                reason: format!(
                    "{} is shorter than retry_base {}",
                    shown(self.max_retry_delay),
                    shown(self.retry_base)
                ),
            });
        }
        Ok(RuntimeConfig {
            allowed_events: Arc::from(self.allowed_events.clone().unwrap_or_default()),
            max_uncommitted: self.max_uncommitted,
            commit_interval: self.commit_interval,
            poll_interval: self.poll_interval,
            shutdown_timeout: self.shutdown_timeout,
            slab_size: self.slab_size,
            retry_base: self.retry_base,
            max_retry_delay: self.max_retry_delay,
            ..RuntimeConfig::new(self.group_id.as_str())
        })
    }
}

#[cfg(test)]
mod precedence;
#[cfg(test)]
mod tests;
