//! The Cassandra stores' options.

use super::{ConfigError, non_empty, positive_duration, positive_size};
use crate::env::Env;
use std::fmt;
use std::num::NonZeroUsize;
use std::time::Duration;

/// A value kept out of logs: its `Debug` and `Display` show `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    #[must_use]
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that needs it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// The options as given to the builder.
#[derive(Clone, Debug, Default)]
pub(crate) struct CassandraOptions {
    pub(crate) nodes: Option<Vec<String>>,
    pub(crate) keyspace: Option<String>,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<Secret>,
    pub(crate) datacenter: Option<String>,
    pub(crate) rack: Option<String>,
    pub(crate) retention: Option<Duration>,
    pub(crate) defer_store_cache_size: Option<usize>,
}

/// The options resolved.
///
/// Invariant: names are non-empty, the retention and cache size positive,
/// and a user and a password come together or not at all.
#[derive(Clone, Debug)]
#[cfg_attr(not(feature = "cassandra"), allow(dead_code))]
pub(crate) struct Cassandra {
    /// Empty: no Cassandra (the stores stay in memory).
    pub(crate) nodes: Vec<String>,
    pub(crate) keyspace: String,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<Secret>,
    pub(crate) datacenter: Option<String>,
    pub(crate) rack: Option<String>,
    pub(crate) retention: Duration,
    pub(crate) defer_store_cache_size: NonZeroUsize,
}

impl CassandraOptions {
    pub(crate) fn resolve<F: Fn(&str) -> Option<String>>(
        &self,
        env: &Env<F>,
    ) -> Result<Cassandra, ConfigError> {
        let optional =
            |value: Option<String>, option| value.map(|v| non_empty(option, v)).transpose();
        let nodes = env.layer(self.nodes.clone(), "PROSODY_CASSANDRA_NODES", Vec::new)?;
        let nodes = nodes
            .into_iter()
            .map(|node| non_empty("cassandra_nodes", node))
            .collect::<Result<Vec<_>, _>>()?;
        let user = optional(
            self.user.clone().or(env.read("PROSODY_CASSANDRA_USER")?),
            "cassandra_user",
        )?;
        let password = match &self.password {
            Some(password) => Some(password.clone()),
            None => env
                .read::<String>("PROSODY_CASSANDRA_PASSWORD")?
                .map(Secret),
        };
        match (&user, &password) {
            (None, Some(_)) => {
                return Err(ConfigError::Invalid {
                    option: "cassandra_password",
                    reason: "is set without cassandra_user".to_owned(),
                });
            }
            (Some(_), None) => {
                return Err(ConfigError::Invalid {
                    option: "cassandra_password",
                    reason: "is required with cassandra_user".to_owned(),
                });
            }
            _ => {}
        }
        Ok(Cassandra {
            nodes,
            keyspace: non_empty(
                "cassandra_keyspace",
                env.layer(self.keyspace.clone(), "PROSODY_CASSANDRA_KEYSPACE", || {
                    "prosody".to_owned()
                })?,
            )?,
            user,
            password,
            datacenter: optional(
                self.datacenter
                    .clone()
                    .or(env.read("PROSODY_CASSANDRA_DATACENTER")?),
                "cassandra_datacenter",
            )?,
            rack: optional(
                self.rack.clone().or(env.read("PROSODY_CASSANDRA_RACK")?),
                "cassandra_rack",
            )?,
            retention: positive_duration(
                "cassandra_retention",
                env.layer(self.retention, "PROSODY_CASSANDRA_RETENTION", || {
                    // One year as humantime counts it (`1y`): 365.25 days.
                    Duration::from_secs(31_557_600)
                })?,
            )?,
            defer_store_cache_size: positive_size(
                "defer_store_cache_size",
                env.layer(
                    self.defer_store_cache_size,
                    "PROSODY_DEFER_STORE_CACHE_SIZE",
                    || 8192,
                )?,
            )?,
        })
    }
}
