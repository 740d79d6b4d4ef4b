//! The peer directory's tables. `peers` (schema version 7): one row per
//! peer, keyed by its id alone, not by group, so every group whose stores
//! share the keyspace shares the directory. A registration writes the row
//! with its lease as the TTL, so Cassandra forgets a peer that stops
//! renewing by itself. `publications` (schema version 8): one row per
//! (subsystem, collection), not keyed by group either, written without a
//! TTL, so a publication is kept until a later one replaces it.

use crate::config::ttl_seconds;
use crate::error::Classify;
use crate::{CassandraStores, Inner};
use prosody_contracts::peer::{PeerEntry, PeerId, Publication};
use prosody_contracts::store::{PeerDirectory, StoreError};
use scylla::client::session::Session;
use scylla::errors::PrepareError;
use scylla::statement::prepared::PreparedStatement;
use std::time::Duration;

/// The statements of the `peers` and `publications` tables.
///
/// Invariant: writes carry `USING TIMESTAMP ?` from the stores'
/// [`WriteClock`](crate::write::WriteClock), so the registrations and the
/// deregistration of one peer (all made by its own process, through one
/// client) apply in the order they were made; a registration carries its
/// lease as `USING TTL ?`, and writes every column (a column not set is
/// written null), so it replaces the earlier entry and lease whole. A
/// publication writes every column too, with no TTL, so the latest
/// `publish` of a pair (by the clock's microseconds: within one client
/// the order they were made, across clients as far as their clocks
/// agree) replaces the earlier whole.
#[derive(Debug)]
pub(crate) struct PeerStatements {
    insert: PreparedStatement,
    delete: PreparedStatement,
    select: PreparedStatement,
    publish: PreparedStatement,
    publication: PreparedStatement,
}

impl PeerStatements {
    pub(crate) async fn prepare(session: &Session, ks: &str) -> Result<Self, PrepareError> {
        let prepare = |cql: String| async move {
            let mut statement = session.prepare(cql).await?;
            // Timestamps fix the writes' order: the driver may retry them.
            statement.set_is_idempotent(true);
            Ok::<_, PrepareError>(statement)
        };
        Ok(Self {
            insert: prepare(format!(
                "INSERT INTO {ks}.peers (peer_id, address, network, advertised) \
                 VALUES (?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
            ))
            .await?,
            delete: prepare(format!(
                "DELETE FROM {ks}.peers USING TIMESTAMP ? WHERE peer_id = ?"
            ))
            .await?,
            select: prepare(format!(
                "SELECT address, network, advertised FROM {ks}.peers WHERE peer_id = ?"
            ))
            .await?,
            publish: prepare(format!(
                "INSERT INTO {ks}.publications \
                 (subsystem, collection, owner_group, topic, identity, published) \
                 VALUES (?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
            ))
            .await?,
            publication: prepare(format!(
                "SELECT owner_group, topic, identity, published FROM {ks}.publications \
                 WHERE subsystem = ? AND collection = ?"
            ))
            .await?,
        })
    }
}

impl Inner {
    /// The lease as a TTL: whole seconds, rounded up, at least one, and at
    /// most the retention (as every row's TTL is; a peer renews its lease
    /// long before).
    fn lease_ttl(&self, ttl: Duration) -> i32 {
        ttl_seconds(ttl).min(self.ttl)
    }

    async fn register(
        &self,
        peer: PeerId,
        entry: &PeerEntry,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let values = (
            peer.to_bytes().to_vec(),
            entry.address.as_str(),
            entry.network.as_deref(),
            entry.advertised.as_deref(),
            self.lease_ttl(ttl),
            self.clock.next(),
        );
        self.session
            .execute_unpaged(&self.peers.insert, values)
            .await
            .map(drop)
            .map_err(Classify::into_store)
    }

    async fn lookup(&self, peer: PeerId) -> Result<Option<PeerEntry>, StoreError> {
        let rows = self
            .session
            .execute_unpaged(&self.peers.select, (peer.to_bytes().to_vec(),))
            .await
            .map_err(Classify::into_store)?
            .into_rows_result()
            .map_err(StoreError::rejected)?;
        let row = rows
            .maybe_first_row::<(String, Option<String>, Option<String>)>()
            .map_err(StoreError::rejected)?;
        Ok(row.map(|(address, network, advertised)| PeerEntry {
            address,
            network,
            advertised,
        }))
    }

    async fn deregister(&self, peer: PeerId) -> Result<(), StoreError> {
        let values = (self.clock.next(), peer.to_bytes().to_vec());
        self.session
            .execute_unpaged(&self.peers.delete, values)
            .await
            .map(drop)
            .map_err(Classify::into_store)
    }

    async fn publish(&self, publication: &Publication) -> Result<(), StoreError> {
        let values = (
            publication.subsystem.as_str(),
            publication.collection.as_str(),
            publication.group.as_str(),
            publication.topic.as_str(),
            publication.identity.as_str(),
            publication.published,
            self.clock.next(),
        );
        self.session
            .execute_unpaged(&self.peers.publish, values)
            .await
            .map(drop)
            .map_err(Classify::into_store)
    }

    async fn publication(
        &self,
        subsystem: &str,
        collection: &str,
    ) -> Result<Option<Publication>, StoreError> {
        let rows = self
            .session
            .execute_unpaged(&self.peers.publication, (subsystem, collection))
            .await
            .map_err(Classify::into_store)?
            .into_rows_result()
            .map_err(StoreError::rejected)?;
        let row = rows
            .maybe_first_row::<(String, String, String, bool)>()
            .map_err(StoreError::rejected)?;
        Ok(row.map(|(group, topic, identity, published)| Publication {
            subsystem: subsystem.to_owned(),
            collection: collection.to_owned(),
            group,
            topic,
            identity,
            published,
        }))
    }
}

/// The directory in the keyspace's `peers` and `publications` tables,
/// shared by every group whose stores use the keyspace. A lease runs out
/// when its row's TTL does: Cassandra counts TTLs in whole seconds, so a
/// lease of `ttl`, rounded up to `n` whole seconds, runs out between
/// `n - 1` and `n` seconds after its registration: within a second of
/// `ttl`. A publication has no TTL: it is kept until replaced. A failed
/// request keeps its category: retriable ([`StoreError::Unavailable`]) or
/// not ([`StoreError::Rejected`]).
impl PeerDirectory for CassandraStores {
    async fn register(
        &self,
        peer: PeerId,
        entry: &PeerEntry,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.0.register(peer, entry, ttl).await
    }

    async fn lookup(&self, peer: PeerId) -> Result<Option<PeerEntry>, StoreError> {
        self.0.lookup(peer).await
    }

    async fn deregister(&self, peer: PeerId) -> Result<(), StoreError> {
        self.0.deregister(peer).await
    }

    async fn publish(&self, publication: &Publication) -> Result<(), StoreError> {
        self.0.publish(publication).await
    }

    async fn publication(
        &self,
        subsystem: &str,
        collection: &str,
    ) -> Result<Option<Publication>, StoreError> {
        self.0.publication(subsystem, collection).await
    }
}
