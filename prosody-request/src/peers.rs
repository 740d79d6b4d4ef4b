//! Where answers go: to an inbox of this process directly; to a peer
//! elsewhere through its directory entry and endpoint.

use crate::inbox::{Inbox, Receipt};
use crate::send::{SendError, Sender};
use crate::wire::Reply;
use prosody_contracts::peer::{PeerEntry, PeerId};
use prosody_contracts::store::{PeerDirectory, StoreError};
use quick_cache::sync::Cache;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

/// The route of an answering member's replies.
///
/// Invariant: a reply for a peer of this process never leaves it; one for
/// another goes to the address its directory entry gives this member's
/// network, with at most `capacity` entries (and connections) kept: the
/// least recently used go first. An entry whose peer cannot be reached is
/// forgotten, so the next reply reads the directory again.
pub struct Peers<D> {
    directory: Option<D>,
    network: Option<String>,
    entries: Cache<PeerId, Arc<PeerEntry>>,
    sender: Sender,
    timeout: Duration,
}

impl<D> std::fmt::Debug for Peers<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers")
            .field("network", &self.network)
            .field("entries", &self.entries.len())
            .finish_non_exhaustive()
    }
}

/// A reply that could not be sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RouteError {
    /// No directory entry for the peer: gone, or its lease ran out.
    #[error("peer {0} is not in the directory (gone, or its lease ran out)")]
    Unknown(PeerId),
    /// The directory could not be read.
    #[error("the peer directory failed: {0}")]
    Directory(#[from] StoreError),
    /// The peer's endpoint could not be reached or refused the reply.
    #[error(transparent)]
    Send(#[from] SendError),
}

impl<D: PeerDirectory> Peers<D> {
    /// A route over `directory` (`None`: replies reach this process's
    /// inboxes only) for a member on `network`, keeping `capacity` peers
    /// and waiting `timeout` for each send.
    #[must_use]
    pub fn new(
        directory: Option<D>,
        network: Option<String>,
        capacity: NonZeroUsize,
        timeout: Duration,
    ) -> Self {
        Self {
            directory,
            network,
            entries: Cache::new(capacity.get()),
            sender: Sender::new(capacity),
            timeout,
        }
    }

    /// Sends `reply` to the peer it is for.
    ///
    /// # Errors
    ///
    /// [`RouteError`] naming why the reply did not reach the peer's
    /// endpoint. A reply that reached it and was dropped there (its request
    /// no longer waits) is `Ok(Receipt::Dropped)`.
    pub async fn send(&self, reply: Reply) -> Result<Receipt, RouteError> {
        if let Some(inbox) = Inbox::local(reply.to) {
            return Ok(inbox.deliver(reply));
        }
        let Some(directory) = &self.directory else {
            return Err(RouteError::Unknown(reply.to));
        };
        let peer = reply.to;
        let entry = if let Some(entry) = self.entries.get(&peer) {
            entry
        } else {
            let entry = directory
                .lookup(peer)
                .await?
                .ok_or(RouteError::Unknown(peer))?;
            let entry = Arc::new(entry);
            self.entries.insert(peer, Arc::clone(&entry));
            entry
        };
        let address = entry.address_from(self.network.as_deref());
        match self.sender.send(address, &reply, self.timeout).await {
            Ok(delivery) => Ok(delivery),
            Err(error) => {
                self.entries.remove(&peer);
                Err(error.into())
            }
        }
    }
}

#[cfg(test)]
mod tests;
