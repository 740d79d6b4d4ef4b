//! Cassandra stores for prosody: the timers, deferred offsets, keyed state
//! and dedup records of one consumer group, and the peer directory every
//! group shares (peers and publications), in one keyspace, outliving the
//! process.
//!
//! [`CassandraStores::connect`] logs in, brings the keyspace's schema to
//! this version ([`schema`]), prepares every statement, and returns stores
//! that implement [`Stores`] (and
//! [`PeerDirectory`](prosody_contracts::store::PeerDirectory)):
//!
//! - a commit is a lone statement, or a logged batch, which Cassandra
//!   applies whole or not at all; a commit of more than 32 KiB of values
//!   stages its state changes and promotes them once its commit point
//!   landed (the `staged` module); each write carries its own timestamp, later than
//!   every earlier write of the same cells, so the writes of a batch apply
//!   in their order and writing a batch again changes nothing;
//! - every row carries the group, so groups sharing a keyspace never see
//!   each other's data (but for the peer directory, which every group
//!   shares, and through [`CassandraStores::for_group`], which reads
//!   another group's published state), and a TTL: dedup records and peers
//!   their own (at most the retention), publications none (kept until
//!   replaced), everything else the retention;
//! - the slab size of a group's timers is recorded with them (by the
//!   group's first client), and [`CassandraStores::connect`] refuses
//!   another ([`ConnectError::SlabSizeChanged`]), which would never find
//!   them (the `slab_size` module);
//! - a request error keeps its category: timeouts and unavailable replicas
//!   are retriable ([`StoreError::Unavailable`]), a refusal (a schema
//!   mismatch, a missing permission) is not ([`StoreError::Rejected`]).
//!
//! Concurrency: the runtime writes a partition only while it owns it, but
//! an old owner may still write after the partition moved (a commit in
//! flight, or a member evicted while it still runs). [`Stores::open`]
//! raises the partition's ownership epoch, and every timer and deferral
//! write of the partition carries a timestamp above every earlier
//! ownership's (the `fence` module), so an old owner's late write neither
//! removes nor overwrites a newer owner's: at most it adds a row for a
//! record the new owner handles again (at-least-once). The defer store's
//! read-modify-write of a key's queue uses what the owner knows of its
//! partitions (loaded at `open`, forgotten at [`Stores::close`]). A write
//! to a partition this client never opened (direct use, outside the
//! runtime) takes an epoch of its own first; one to a partition it closed
//! is refused. The epoch's transactions run at `SERIAL` (a quorum of every
//! datacenter).

mod cells;
mod config;
mod dedup;
mod defer;
mod directory;
mod error;
mod fence;
mod known;
pub mod schema;
mod slab_size;
mod staged;
mod statements;
mod timer;
mod write;

pub use config::CassandraConfig;
pub use error::ConnectError;

use crate::cells::Layouts;
use crate::directory::PeerStatements;
use crate::fence::Fences;
use crate::known::Known;
use crate::staged::Unresolved;
use crate::statements::Statements;
use crate::write::{CHUNK_BYTES, WriteClock, Writes};
use bytes::Bytes;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::clock::Timestamp;
use prosody_contracts::key::Key;
use prosody_contracts::store::timer::SlabSize;
use prosody_contracts::store::{
    Batch, DedupKey, DedupStore, DeferCounts, DeferStore, Deferred, Direction, ItemRange,
    StateStore, StoreError, Stores, TimerEntry, TimerKind, TimerStore,
};
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use std::fmt;
use std::num::NonZeroUsize;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// The timer, defer, state and dedup stores of one consumer group, and the
/// peer directory every group shares, on Cassandra; clones share one
/// session.
#[derive(Clone)]
pub struct CassandraStores(Arc<Inner>);

/// One group's view of the stores: the group, and what this client knows
/// of that group's partitions and collections; the rest is [`Shared`].
pub(crate) struct Inner {
    shared: Arc<Shared>,
    group: Arc<str>,
    fences: Fences,
    known: Known,
    /// Txns of large commits this client left unfinished.
    unresolved: Unresolved,
    /// The layout of each collection identified.
    layouts: Layouts,
}

/// What every group's view of one connection shares: the session, the
/// statements and the configuration.
pub(crate) struct Shared {
    session: Session,
    statements: Statements,
    /// The peer directory's statements.
    peers: PeerStatements,
    keyspace: String,
    /// The retention as a TTL, in seconds.
    ttl: i32,
    slab_size: SlabSize,
    /// Timestamps of dedup records, which belong to no partition.
    clock: WriteClock,
    recovery_delay: Duration,
    /// The size of the defer store's cache of each group's view.
    cache_size: NonZeroUsize,
}

impl Deref for Inner {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl Inner {
    /// A view of `shared` as `group`, knowing nothing yet of its
    /// partitions and collections.
    fn new(shared: Arc<Shared>, group: &str) -> Self {
        Self {
            known: Known::new(shared.cache_size),
            shared,
            group: Arc::from(group),
            fences: Fences::default(),
            unresolved: Unresolved::default(),
            layouts: Layouts::default(),
        }
    }
}

impl fmt::Debug for CassandraStores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CassandraStores")
            .field("keyspace", &self.0.keyspace)
            .field("group", &self.0.group)
            .finish_non_exhaustive()
    }
}

/// Whether a failed connection was a refused login.
fn refused_login(error: &scylla::errors::NewSessionError) -> bool {
    let shown = format!("{error} {error:?}");
    [
        "AuthenticationError",
        "MissingAuthentication",
        "Authentication is required",
        "password are incorrect",
    ]
    .iter()
    .any(|sign| shown.contains(sign))
}

impl CassandraStores {
    /// Connects for consumer group `group`: logs in, migrates the keyspace
    /// (creating it if missing), checks the slab size against the one
    /// recorded with the group's timers (recording it if the group has
    /// none), and prepares the statements.
    ///
    /// # Errors
    ///
    /// A bad option ([`ConnectError::Invalid`]), a refused login
    /// ([`ConnectError::Authentication`]), nodes that do not answer within
    /// the connect timeout ([`ConnectError::Unreachable`]), a keyspace of a
    /// newer schema ([`ConnectError::NewerSchema`]), a failed migration, or
    /// a slab size other than the group's timers were stored with
    /// ([`ConnectError::SlabSizeChanged`]).
    pub async fn connect(config: &CassandraConfig, group: &str) -> Result<Self, ConnectError> {
        config::validate(config, group)?;
        let profile = ExecutionProfile::builder()
            .request_timeout(Some(config.request_timeout))
            .build();
        let mut builder = SessionBuilder::new()
            .known_nodes(&config.nodes)
            .connection_timeout(config.connect_timeout)
            .default_execution_profile_handle(profile.into_handle());
        if let Some((user, password)) = &config.credentials {
            builder = builder.user(user.as_str(), password.as_str());
        }
        builder = match (&config.datacenter, &config.rack) {
            (Some(dc), Some(rack)) => builder.prefer_datacenter_and_rack(dc.clone(), rack.clone()),
            (Some(dc), None) => builder.prefer_datacenter(dc.clone()),
            _ => builder,
        };
        let session = match tokio::time::timeout(config.connect_timeout, builder.build()).await {
            Ok(Ok(session)) => session,
            Ok(Err(error)) if refused_login(&error) => {
                return Err(ConnectError::Authentication {
                    reason: error.to_string(),
                });
            }
            Ok(Err(error)) => return Err(ConnectError::Unreachable(error.to_string())),
            Err(_) => {
                return Err(ConnectError::Unreachable(format!(
                    "no answer from {:?} within {:?}",
                    config.nodes, config.connect_timeout
                )));
            }
        };
        schema::migrate(&session, &config.keyspace).await?;
        slab_size::check(&session, &config.keyspace, group, config.slab_size).await?;
        // Boxed, as the peers' below: inline, its future would add to
        // every connect's.
        let statements = Box::pin(Statements::prepare(&session, &config.keyspace))
            .await
            .map_err(|e| ConnectError::Migration(format!("preparing the statements: {e}")))?;
        // Boxed: inline, its future would add to every connect's.
        let peers = Box::pin(PeerStatements::prepare(&session, &config.keyspace))
            .await
            .map_err(|e| ConnectError::Migration(format!("preparing the statements: {e}")))?;
        info!(keyspace = %config.keyspace, group, "Cassandra stores ready");
        let shared = Shared {
            session,
            statements,
            peers,
            keyspace: config.keyspace.clone(),
            ttl: config.ttl(),
            slab_size: config.slab_size,
            clock: WriteClock::default(),
            recovery_delay: config.recovery_delay,
            cache_size: config.cache_size,
        };
        Ok(Self(Arc::new(Inner::new(Arc::new(shared), group))))
    }

    /// The same stores (same session, statements and configuration)
    /// reading and writing as consumer group `group`: for reading another
    /// group's keyed state, such as a collection that group publishes
    /// ([`PeerDirectory::publication`](prosody_contracts::store::PeerDirectory::publication)
    /// names the group). Cheap: it shares this connection and starts with
    /// empty caches of its own (the defer index, the collections' layouts,
    /// the large commits left unfinished, the partitions' epochs), so it
    /// never mixes what it learns with this group's.
    ///
    /// It must not be used to commit, or to open or close partitions: the
    /// other group's members own its partitions, and a write through
    /// these stores would take an ownership epoch of its own, fencing the
    /// owner's writes. Nor does it check the group's slab size: its timers
    /// are not for it to read.
    #[must_use]
    pub fn for_group(&self, group: &str) -> Self {
        Self(Arc::new(Inner::new(Arc::clone(&self.0.shared), group)))
    }

    /// Writes a batch; returns the deferral states it left.
    async fn write(
        &self,
        partition: &TopicPartition,
        batch: Batch,
    ) -> Result<Vec<defer::Change>, StoreError> {
        let inner = &self.0;
        let mut writes = Writes::default();
        inner
            .timer_writes(partition, &batch.timers, &mut writes)
            .await?;
        let changes = inner
            .deferral_writes(partition, &batch.deferrals, &mut writes)
            .await?;
        // From here the deferral changes are counted: whatever ends this
        // write before it lands (a failed state read, a failed or dropped
        // execution) leaves their keys unsure, to be read again.
        let unsure = Unsure {
            inner,
            partition,
            changes: Some(changes),
        };
        inner.dedup_writes(&batch.dedup, &mut writes);
        let mut state = Writes::default();
        inner
            .state_writes(partition, &batch.state, &mut state)
            .await?;
        // State changes past one batch go through a txn (the `staged`
        // module), so they land whole.
        let staged = state.len() > 0 && writes.bytes() + state.bytes() > CHUNK_BYTES;
        if !staged {
            writes.append(state);
        }
        if writes.len() == 0 && !staged {
            return Ok(unsure.landed());
        }
        if staged {
            self.0
                .commit_staged(partition, &batch.state, writes)
                .await?;
        } else {
            writes.execute(&inner.session).await?;
        }
        Ok(unsure.landed())
    }

    /// Every key of the partition with deferred offsets, in no particular
    /// order: the index a new owner loads at [`Stores::open`], for
    /// operators and checks.
    ///
    /// # Errors
    ///
    /// The read's.
    pub async fn deferred_keys(&self, partition: &TopicPartition) -> Result<Vec<Key>, StoreError> {
        self.0.deferred_keys(partition).await
    }
}

/// A commit's deferral changes whose outcome is not known yet: dropped
/// before [`Unsure::landed`], they make their keys unsure.
struct Unsure<'a> {
    inner: &'a Inner,
    partition: &'a TopicPartition,
    changes: Option<Vec<defer::Change>>,
}

impl Unsure<'_> {
    /// The commit landed: its changes are known.
    fn landed(mut self) -> Vec<defer::Change> {
        let changes = self.changes.take().unwrap_or_default();
        self.inner.settle_deferrals(self.partition, &changes, true);
        changes
    }
}

impl Drop for Unsure<'_> {
    fn drop(&mut self) {
        if let Some(changes) = self.changes.take() {
            self.inner.settle_deferrals(self.partition, &changes, false);
        }
    }
}

impl Stores for CassandraStores {
    /// The data lives in Cassandra.
    fn durable(&self) -> bool {
        true
    }

    async fn commit(&self, partition: &TopicPartition, batch: Batch) -> Result<(), StoreError> {
        self.write(partition, batch).await.map(drop)
    }

    /// Takes the partition (a new ownership epoch, which fences the writes
    /// of every earlier owner), loads its deferred keys, then prunes its
    /// empty past slabs; a failed prune is logged, not returned.
    async fn open(&self, partition: &TopicPartition) -> Result<(), StoreError> {
        self.0.take(partition).await?;
        self.0.resolve_all(partition).await?;
        self.0.open_deferrals(partition).await?;
        if let Err(error) = self.0.prune_slabs(partition).await {
            warn!(%partition, %error, "pruning empty timer slabs failed; loads read them");
        }
        Ok(())
    }

    fn close(&self, partition: &TopicPartition) {
        self.0.known.close(partition);
        self.0.unresolved.close(partition);
        self.0.fences.forget(partition);
    }
}

impl TimerStore for CassandraStores {
    async fn scheduled(
        &self,
        partition: &TopicPartition,
        key: &Key,
        kind: TimerKind,
    ) -> Result<Vec<Timestamp>, StoreError> {
        self.0.scheduled(partition, key, kind).await
    }

    async fn load(
        &self,
        partition: &TopicPartition,
        from: Timestamp,
        until: Timestamp,
    ) -> Result<Vec<TimerEntry>, StoreError> {
        self.0.load(partition, from, until).await
    }
}

impl DeferStore for CassandraStores {
    fn peek(&self, partition: &TopicPartition, key: &Key) -> Option<bool> {
        self.0.known.peek(partition, key)
    }

    /// From memory for a partition this client opened (read at open, kept
    /// by its commits); else read from the partition's counts row.
    async fn counts(&self, partition: &TopicPartition) -> Result<DeferCounts, StoreError> {
        self.0.counts(partition).await
    }

    /// Answers for a partition this client opened.
    fn counts_now(&self, partition: &TopicPartition) -> Option<DeferCounts> {
        self.0.known.counts(partition)
    }

    async fn deferred(
        &self,
        partition: &TopicPartition,
        key: &Key,
    ) -> Result<Option<Deferred>, StoreError> {
        self.0.deferred(partition, key).await
    }
}

impl StateStore for CassandraStores {
    async fn identify(&self, name: &str, identity: &str) -> Result<String, StoreError> {
        self.0.identify(name, identity).await
    }

    async fn cell(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        item: &[u8],
    ) -> Result<Option<Bytes>, StoreError> {
        self.0.resolve_key(partition, key).await?;
        self.0.cell(partition, collection, key, item).await
    }

    async fn cells(
        &self,
        partition: &TopicPartition,
        collection: &str,
        key: &Key,
        range: &ItemRange,
        direction: Direction,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, StoreError> {
        self.0.resolve_key(partition, key).await?;
        self.0
            .cells(partition, collection, key, range, direction, limit)
            .await
    }
}

impl DedupStore for CassandraStores {
    async fn contains(&self, key: DedupKey) -> Result<bool, StoreError> {
        self.0.contains(key).await
    }
}
