//! What can go wrong: at connect time ([`ConnectError`]), and per request
//! (a [`StoreError`] whose category says whether to try again).

use prosody_contracts::store::StoreError;
use scylla::errors::{
    BadQuery, DbError, DeserializationError, ExecutionError, NextPageError, NextRowError,
    PagerExecutionError, PrepareError, RequestAttemptError, RequestError, TypeCheckError,
};
use std::time::Duration;

/// Why [`CassandraStores::connect`](crate::CassandraStores::connect)
/// failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// An option breaks its rule.
    #[error("invalid Cassandra option `{option}`: {reason}")]
    Invalid {
        /// The option.
        option: &'static str,
        /// The rule it breaks.
        reason: String,
    },
    /// The nodes refused the login.
    #[error("Cassandra refused the login: authentication failed ({reason})")]
    Authentication {
        /// What the driver reported (never the password).
        reason: String,
    },
    /// The nodes did not answer in time, or failed to.
    #[error("Cassandra did not answer: {0}")]
    Unreachable(String),
    /// The keyspace holds a schema newer than this version knows.
    #[error(
        "keyspace `{keyspace}` has schema version {found}, newer than version {known} that \
         this library knows: upgrade it before running against this keyspace"
    )]
    NewerSchema {
        /// The keyspace.
        keyspace: String,
        /// The version found.
        found: i32,
        /// The newest version this library knows.
        known: i32,
    },
    /// Creating or migrating the schema failed.
    #[error("the schema migration failed: {0}")]
    Migration(String),
    /// The group's timers are stored in slabs of another size than the
    /// configured `slab_size`.
    ///
    /// Guarantee: a client never starts with a slab size other than the
    /// one its group's stored timers were written with (recorded in
    /// `timer_slab_sizes` by the group's first client), because it would
    /// look for them in slabs that do not hold them: they would never fire
    /// and could not be unscheduled. Not retriable: set `slab_size` back to
    /// `stored`, or give the group new timer storage.
    #[error(
        "the timers of group `{group}` in keyspace `{keyspace}` are stored with slab_size {}, \
         but slab_size is {}: with another slab size this client would never find them (they \
         would not fire and could not be unscheduled). Set slab_size back to {}, or give the \
         group new timer storage (another cassandra_keyspace)",
        humantime::format_duration(*.stored),
        humantime::format_duration(*.configured),
        humantime::format_duration(*.stored)
    )]
    SlabSizeChanged {
        /// The consumer group.
        group: String,
        /// The keyspace of its timers.
        keyspace: String,
        /// The slab size recorded with the group's timers.
        stored: Duration,
        /// The configured slab size.
        configured: Duration,
    },
}

impl ConnectError {
    /// Whether trying again may help: `true` for nodes that did not answer
    /// or a migration that failed on the way, `false` for a refused login,
    /// a bad option, an unknown schema or a changed slab size.
    #[must_use]
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::Unreachable(_) | Self::Migration(_))
    }
}

/// Errors the server answers that trying again does not fix.
fn refusal(error: &DbError) -> bool {
    matches!(
        error,
        DbError::SyntaxError
            | DbError::Invalid
            | DbError::AlreadyExists { .. }
            | DbError::FunctionFailure { .. }
            | DbError::AuthenticationError
            | DbError::Unauthorized
            | DbError::ConfigError
            | DbError::ProtocolError
    )
}

fn attempt_refused(error: &RequestAttemptError) -> bool {
    match error {
        RequestAttemptError::DbError(db, _) => refusal(db),
        RequestAttemptError::SerializationError(_)
        | RequestAttemptError::CqlResultParseError(_) => true,
        _ => false,
    }
}

fn execution_refused(error: &ExecutionError) -> bool {
    match error {
        ExecutionError::BadQuery(_) => true,
        ExecutionError::LastAttemptError(attempt) => attempt_refused(attempt),
        ExecutionError::PrepareError(PrepareError::AllAttemptsFailed { first_attempt }) => {
            attempt_refused(first_attempt)
        }
        _ => false,
    }
}

fn page_refused(error: &NextPageError) -> bool {
    match error {
        NextPageError::TypeCheckError(_) => true,
        NextPageError::RequestFailure(RequestError::LastAttemptError(attempt)) => {
            attempt_refused(attempt)
        }
        _ => false,
    }
}

/// A failed request as a store error: refused (the schema or the request
/// is wrong, the login lacks a permission) or unavailable (anything that
/// may pass later: timeouts, unavailable replicas, broken connections).
pub(crate) trait Classify: std::error::Error + Send + Sync + Sized + 'static {
    fn refused(&self) -> bool;

    fn into_store(self) -> StoreError {
        if self.refused() {
            StoreError::rejected(self)
        } else {
            StoreError::unavailable(self)
        }
    }
}

impl Classify for ExecutionError {
    fn refused(&self) -> bool {
        execution_refused(self)
    }
}

impl Classify for PagerExecutionError {
    fn refused(&self) -> bool {
        match self {
            Self::PrepareError(PrepareError::AllAttemptsFailed { first_attempt }) => {
                attempt_refused(first_attempt)
            }
            Self::SerializationError(_) => true,
            Self::NextPageError(page) => page_refused(page),
            _ => false,
        }
    }
}

impl Classify for NextRowError {
    fn refused(&self) -> bool {
        match self {
            Self::NextPageError(page) => page_refused(page),
            Self::RowDeserializationError(_) => true,
            _ => false,
        }
    }
}

impl Classify for TypeCheckError {
    fn refused(&self) -> bool {
        true
    }
}

impl Classify for DeserializationError {
    fn refused(&self) -> bool {
        true
    }
}

impl Classify for BadQuery {
    fn refused(&self) -> bool {
        true
    }
}

/// A stored value this version cannot read.
#[derive(Debug, thiserror::Error)]
#[error("a stored {what} is invalid: {value}")]
pub(crate) struct Corrupt {
    pub(crate) what: &'static str,
    pub(crate) value: String,
}

impl Corrupt {
    pub(crate) fn store(what: &'static str, value: impl std::fmt::Display) -> StoreError {
        StoreError::rejected(Self {
            what,
            value: value.to_string(),
        })
    }
}
