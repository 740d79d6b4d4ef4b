//! The peer directory: where each process that waits for answers to its
//! requests can be reached, and where each published keyed-state
//! collection is held.

use super::StoreError;
use crate::peer::{PeerEntry, PeerId, Publication};
use std::future::Future;
use std::time::Duration;

/// A directory of peers, each registered under a lease: the entry of a
/// process that stops renewing it disappears once its lease runs out, so a
/// peer killed without deregistering stops receiving answers within one
/// lease.
///
/// Unlike the other stores it is shared by every group and written
/// directly (registration is no attempt's change): a requester of any
/// group registers, and a member of any group looks it up to answer.
///
/// Contract (checked by the conformance suite,
/// `prosody_conformance::store::directory`):
///
/// - After [`register`](Self::register) returns, [`lookup`](Self::lookup)
///   of the peer returns its entry until the lease runs out, or until it
///   registers again (the later entry and lease replace the earlier) or
///   deregisters.
/// - A lease runs out `ttl` after its registration, give or take the
///   store's clock granularity (at most a second); then `lookup` returns
///   `None`.
/// - [`deregister`](Self::deregister) of a peer never registered, or gone,
///   succeeds and changes nothing.
/// - Peers are independent.
/// - After [`publish`](Self::publish) returns,
///   [`publication`](Self::publication) of its (subsystem, collection)
///   returns it, until a later `publish` of the same pair replaces it
///   (whole, `published` included). A publication has no lease and no
///   TTL: it is kept until replaced; retiring one is publishing it with
///   `published: false`.
/// - `publication` of a pair never published returns `None`.
/// - Publications and peers are independent, and so are (subsystem,
///   collection) pairs: a pair sharing its subsystem or its collection
///   with another is still another pair.
pub trait PeerDirectory: Clone + Send + Sync + 'static {
    /// Registers (or renews) `peer` with `entry` for `ttl`.
    fn register(
        &self,
        peer: PeerId,
        entry: &PeerEntry,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The entry of `peer`, if registered and its lease runs.
    fn lookup(
        &self,
        peer: PeerId,
    ) -> impl Future<Output = Result<Option<PeerEntry>, StoreError>> + Send;

    /// Removes `peer`'s entry.
    fn deregister(&self, peer: PeerId) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Publishes (or replaces, or retires) the publication of its
    /// (subsystem, collection).
    fn publish(
        &self,
        publication: &Publication,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The latest publication of `collection` by `subsystem`, if any.
    fn publication(
        &self,
        subsystem: &str,
        collection: &str,
    ) -> impl Future<Output = Result<Option<Publication>, StoreError>> + Send;
}
