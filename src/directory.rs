//! The client's peer directory, whichever store holds it: one opaque type,
//! so no signature of the facade names a backend.

use prosody_core::peer::{PeerEntry, PeerId, Publication};
use prosody_core::store::{PeerDirectory, StoreError};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

type Call<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// [`PeerDirectory`] with boxed futures (its calls are off the hot path:
/// a registration per lease third, a lookup per new peer).
trait DynDirectory: Send + Sync {
    fn register<'a>(&'a self, peer: PeerId, entry: &'a PeerEntry, ttl: Duration) -> Call<'a, ()>;
    fn lookup(&self, peer: PeerId) -> Call<'_, Option<PeerEntry>>;
    fn deregister(&self, peer: PeerId) -> Call<'_, ()>;
    fn publish<'a>(&'a self, publication: &'a Publication) -> Call<'a, ()>;
    fn publication<'a>(
        &'a self,
        subsystem: &'a str,
        collection: &'a str,
    ) -> Call<'a, Option<Publication>>;
}

impl<D: PeerDirectory> DynDirectory for D {
    fn register<'a>(&'a self, peer: PeerId, entry: &'a PeerEntry, ttl: Duration) -> Call<'a, ()> {
        Box::pin(PeerDirectory::register(self, peer, entry, ttl))
    }

    fn lookup(&self, peer: PeerId) -> Call<'_, Option<PeerEntry>> {
        Box::pin(PeerDirectory::lookup(self, peer))
    }

    fn deregister(&self, peer: PeerId) -> Call<'_, ()> {
        Box::pin(PeerDirectory::deregister(self, peer))
    }

    fn publish<'a>(&'a self, publication: &'a Publication) -> Call<'a, ()> {
        Box::pin(PeerDirectory::publish(self, publication))
    }

    fn publication<'a>(
        &'a self,
        subsystem: &'a str,
        collection: &'a str,
    ) -> Call<'a, Option<Publication>> {
        Box::pin(PeerDirectory::publication(self, subsystem, collection))
    }
}

/// The peer directory of a client's stores (the Cassandra stores'), where
/// requesters register their endpoints and answering members find them.
#[derive(Clone)]
pub(crate) struct ClientDirectory(Arc<dyn DynDirectory>);

impl ClientDirectory {
    #[cfg_attr(not(feature = "cassandra"), allow(dead_code))]
    pub(crate) fn new(directory: impl PeerDirectory) -> Self {
        Self(Arc::new(directory))
    }
}

impl fmt::Debug for ClientDirectory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientDirectory")
    }
}

impl PeerDirectory for ClientDirectory {
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

/// Rebinds the client's durable stores to another group, for reading its
/// published cells (the Cassandra stores'; `None` for the others).
pub(crate) type Rebind =
    std::sync::Arc<dyn Fn(&str) -> prosody_core::store::AnyStores + Send + Sync>;
