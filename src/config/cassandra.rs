//! The Cassandra stores' options.

use super::{ConfigError, Values};
use crate::env::FromEnv;
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

impl FromEnv for Secret {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(Self::new(text))
    }
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

impl Values {
    pub(super) fn cassandra(&self) -> Result<Cassandra, ConfigError> {
        let (user, password) = (&self.cassandra_user, &self.cassandra_password);
        match (user, password) {
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
            nodes: self.cassandra_nodes.clone().unwrap_or_default(),
            keyspace: self.cassandra_keyspace.clone(),
            user: user.clone(),
            password: password.clone(),
            datacenter: self.cassandra_datacenter.clone(),
            rack: self.cassandra_rack.clone(),
            retention: self.cassandra_retention,
            defer_store_cache_size: self.defer_store_cache_size,
        })
    }
}
