//! How to reach Cassandra, and how long data lives there.

use crate::error::ConnectError;
use prosody_contracts::store::timer::SlabSize;
use std::fmt;
use std::num::NonZeroUsize;
use std::time::Duration;

/// The longest TTL Cassandra accepts: twenty years, in seconds.
pub(crate) const MAX_TTL: u64 = 630_720_000;

/// The options of [`CassandraStores::connect`](crate::CassandraStores::connect).
///
/// Invariant: what [`connect`](crate::CassandraStores::connect) accepts has
/// at least one node, a keyspace that is a plain CQL identifier, a rack
/// only with a datacenter, and a retention of at least a second; the
/// password never shows in `Debug` output.
#[derive(Clone)]
#[must_use]
pub struct CassandraConfig {
    pub(crate) nodes: Vec<String>,
    pub(crate) keyspace: String,
    pub(crate) credentials: Option<(String, String)>,
    pub(crate) datacenter: Option<String>,
    pub(crate) rack: Option<String>,
    pub(crate) retention: Duration,
    pub(crate) cache_size: NonZeroUsize,
    pub(crate) slab_size: SlabSize,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) recovery_delay: Duration,
}

impl CassandraConfig {
    /// The defaults, with these contact points (`host:port`): keyspace
    /// `prosody`, no login, retention one year, 8192 cached deferral
    /// entries, hour slabs, 10 s to connect and 10 s per request, 30 s of
    /// recovery delay.
    pub fn new<I: IntoIterator<Item = T>, T: Into<String>>(nodes: I) -> Self {
        Self {
            nodes: nodes.into_iter().map(Into::into).collect(),
            keyspace: "prosody".to_owned(),
            credentials: None,
            datacenter: None,
            rack: None,
            // One year as humantime counts it: 365.25 days.
            retention: Duration::from_secs(31_557_600),
            cache_size: NonZeroUsize::new(8192).unwrap_or(NonZeroUsize::MIN),
            slab_size: SlabSize::DEFAULT,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
            recovery_delay: Duration::from_secs(30),
        }
    }

    /// The keyspace of the tables; created (replication factor one, with a
    /// warning) if it does not exist.
    pub fn keyspace(mut self, keyspace: impl Into<String>) -> Self {
        self.keyspace = keyspace.into();
        self
    }

    /// Logs in as `user` with `password` (Cassandra's
    /// `PasswordAuthenticator`).
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// Prefers the nodes of this datacenter.
    pub fn datacenter(mut self, datacenter: impl Into<String>) -> Self {
        self.datacenter = Some(datacenter.into());
        self
    }

    /// Prefers the nodes of this rack of the datacenter.
    pub fn rack(mut self, rack: impl Into<String>) -> Self {
        self.rack = Some(rack.into());
        self
    }

    /// How long anything written lives at most (its TTL); capped at
    /// Cassandra's twenty years.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// How many keys' deferral state the defer store keeps read.
    pub fn defer_cache_size(mut self, size: NonZeroUsize) -> Self {
        self.cache_size = size;
        self
    }

    /// The span of time one slab of timers covers.
    ///
    /// Guarantee: it is fixed per consumer group. The group's first client
    /// records its slab size with the group's timers, and
    /// [`connect`](crate::CassandraStores::connect) refuses any other
    /// ([`ConnectError::SlabSizeChanged`](crate::ConnectError::SlabSizeChanged),
    /// naming both sizes), since a client with another size would never
    /// find the stored timers. To change it, give the group new timer
    /// storage (another keyspace). A group whose timers predate the record
    /// gets the size of its first client of this version: keep the old
    /// size in that deploy.
    pub fn slab_size(mut self, slab_size: SlabSize) -> Self {
        self.slab_size = slab_size;
        self
    }

    /// How long [`connect`](crate::CassandraStores::connect) waits for the
    /// nodes to answer.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a commit larger than one batch that failed before its
    /// commit point stays undecided, its keys' reads retrying, before it is
    /// forgotten (default 30s; the client's `state_recovery_delay`).
    pub fn recovery_delay(mut self, delay: Duration) -> Self {
        self.recovery_delay = delay;
        self
    }

    /// How long one request may take before it fails as retriable.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The retention in whole seconds, as a TTL: at least one, at most
    /// [`MAX_TTL`].
    pub(crate) fn ttl(&self) -> i32 {
        ttl_seconds(self.retention)
    }
}

/// `duration` as a TTL in whole seconds (rounded up), within 1 and
/// [`MAX_TTL`].
pub(crate) fn ttl_seconds(duration: Duration) -> i32 {
    let seconds = duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0));
    i32::try_from(seconds.clamp(1, MAX_TTL)).unwrap_or(i32::MAX)
}

impl fmt::Debug for CassandraConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CassandraConfig")
            .field("nodes", &self.nodes)
            .field("keyspace", &self.keyspace)
            .field("user", &self.credentials.as_ref().map(|(user, _)| user))
            .field("password", &self.credentials.as_ref().map(|_| "***"))
            .field("datacenter", &self.datacenter)
            .field("rack", &self.rack)
            .field("retention", &self.retention)
            .field("cache_size", &self.cache_size)
            .field("slab_size", &self.slab_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("recovery_delay", &self.recovery_delay)
            .finish()
    }
}

/// A plain CQL identifier: a letter, then letters, digits or `_`, at most
/// 48 in all.
pub(crate) fn identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 48
}

pub(crate) fn validate(config: &CassandraConfig, group: &str) -> Result<(), ConnectError> {
    let invalid = |option, reason: &str| {
        Err(ConnectError::Invalid {
            option,
            reason: reason.to_owned(),
        })
    };
    if config.nodes.is_empty() || config.nodes.iter().any(|node| node.trim().is_empty()) {
        return invalid(
            "cassandra_nodes",
            "needs at least one host:port, none empty",
        );
    }
    if !identifier(&config.keyspace) {
        return Err(ConnectError::Invalid {
            option: "cassandra_keyspace",
            reason: format!(
                "{:?} is not a letter followed by at most 47 letters, digits or `_`",
                config.keyspace
            ),
        });
    }
    if config.rack.is_some() && config.datacenter.is_none() {
        return invalid("cassandra_rack", "needs cassandra_datacenter");
    }
    if config.retention < Duration::from_secs(1) {
        return invalid("cassandra_retention", "must be at least 1s");
    }
    if group.is_empty() {
        return invalid("group_id", "must not be empty");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{CassandraConfig, MAX_TTL, ttl_seconds};
    use std::time::Duration;

    #[test]
    fn the_password_never_shows() {
        let config = CassandraConfig::new(["n:9042"]).credentials("svc", "hunter2-secret");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2-secret"), "{shown}");
        assert!(shown.contains("svc"), "{shown}");
    }

    #[test]
    fn ttls_round_up_and_stay_in_range() {
        assert_eq!(ttl_seconds(Duration::from_millis(1)), 1);
        assert_eq!(ttl_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(ttl_seconds(Duration::ZERO), 1);
        assert_eq!(
            ttl_seconds(Duration::from_secs(u64::MAX)),
            i32::try_from(MAX_TTL).unwrap_or(i32::MAX)
        );
    }
}
