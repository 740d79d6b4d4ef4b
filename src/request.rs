//! Requests to named subsystems: a client sends a record and waits for the
//! answers of the subsystems it names (see the README's Requests section).

use crate::client::{ClientError, ProsodyClient};
use crate::config::PeerSettings;
use crate::config::default_interface;
use crate::directory::ClientDirectory;
use prosody_core::broker::OutgoingRecord;
use prosody_core::peer::{Asked, PeerEntry, PeerId, RequestId};
use prosody_core::store::PeerDirectory;
use prosody_core::{Codec, Key};
use prosody_request::{Endpoint, Inbox, Outcomes, Peers};
use serde::de::DeserializeOwned;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, OnceCell};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

/// How long a clean shutdown waits for the directory to delete the
/// client's entry (it runs out with its lease otherwise).
const DEREGISTER_TIMEOUT: Duration = Duration::from_secs(5);

/// A client's requests: where their answers arrive, and the route of the
/// answers it gives as a subsystem.
///
/// Invariant: one inbox per client life, opened at the first request under
/// a fresh peer id; with a directory, its endpoint is registered under a
/// lease renewed every third of `peer_registration_ttl` until the client
/// shuts down, which deletes the entry and closes the endpoint.
#[derive(Debug)]
pub(crate) struct Requests {
    settings: PeerSettings,
    directory: Option<ClientDirectory>,
    route: Arc<Peers<ClientDirectory>>,
    receiver: OnceCell<Receiver>,
    /// What shutdown closes: the endpoint and its lease.
    listening: Mutex<Option<Listening>>,
}

#[derive(Debug)]
struct Receiver {
    inbox: Arc<Inbox>,
}

/// A peer endpoint, registered under a lease.
#[derive(Debug)]
struct Listening {
    endpoint: Endpoint,
    renew: JoinHandle<()>,
    directory: ClientDirectory,
    peer: PeerId,
}

impl Requests {
    pub(crate) fn new(
        settings: PeerSettings,
        directory: Option<ClientDirectory>,
        send_timeout: Duration,
    ) -> Self {
        let route = Arc::new(Peers::new(
            directory.clone(),
            settings.network.clone(),
            settings.cache_capacity,
            send_timeout,
        ));
        Self {
            settings,
            directory,
            route,
            receiver: OnceCell::new(),
            listening: Mutex::new(None),
        }
    }

    /// The peer id of the client's inbox, once opened.
    pub(crate) fn peer(&self) -> Option<PeerId> {
        self.receiver.get().map(|receiver| receiver.inbox.peer())
    }

    /// The route of this client's answers.
    pub(crate) fn route(&self) -> &Arc<Peers<ClientDirectory>> {
        &self.route
    }

    /// The client's inbox, opened on first use: with a directory, behind a
    /// registered endpoint.
    async fn inbox(&self) -> Result<&Arc<Inbox>, ClientError> {
        let receiver = self
            .receiver
            .get_or_try_init(|| async {
                let peer =
                    PeerId::random().map_err(|error| ClientError::Peer(error.to_string()))?;
                let inbox = Inbox::open(peer);
                if let Some(directory) = &self.directory {
                    let listening = self.listen(directory, &inbox).await?;
                    *self.listening.lock().await = Some(listening);
                }
                Ok::<_, ClientError>(Receiver { inbox })
            })
            .await?;
        Ok(&receiver.inbox)
    }

    /// Binds the endpoint and registers it.
    async fn listen(
        &self,
        directory: &ClientDirectory,
        inbox: &Arc<Inbox>,
    ) -> Result<Listening, ClientError> {
        let peer = inbox.peer();
        let endpoint = Endpoint::bind(self.settings.bind_address(), Arc::clone(inbox))
            .await
            .map_err(|error| ClientError::Peer(error.to_string()))?;
        let entry = PeerEntry {
            address: reachable(endpoint.local_addr()).to_string(),
            network: self.settings.network.clone(),
            advertised: self.settings.advertised.clone(),
        };
        let ttl = self.settings.registration_ttl;
        if let Err(error) = directory.register(peer, &entry, ttl).await {
            endpoint.shutdown().await;
            return Err(ClientError::Peer(format!(
                "registering in the peer directory failed: {error}"
            )));
        }
        debug!(%peer, address = %entry.address, "peer endpoint registered");
        let renew = tokio::spawn(renew(directory.clone(), peer, entry, ttl));
        Ok(Listening {
            endpoint,
            renew,
            directory: directory.clone(),
            peer,
        })
    }

    /// Deletes the client's directory entry and closes its endpoint.
    pub(crate) async fn close(&self) {
        let Some(listening) = self.listening.lock().await.take() else {
            return;
        };
        listening.renew.abort();
        let deregister = listening.directory.deregister(listening.peer);
        match tokio::time::timeout(DEREGISTER_TIMEOUT, deregister).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => warn!(%error, "deleting the peer entry failed; its lease runs out"),
            Err(_) => warn!("deleting the peer entry timed out; its lease runs out"),
        }
        listening.endpoint.shutdown().await;
    }
}

/// The address peers connect to: the bound one, or, bound to every
/// interface, the default interface's address with the bound port.
fn reachable(bound: SocketAddr) -> SocketAddr {
    if bound.ip().is_unspecified() {
        SocketAddr::new(default_interface(), bound.port())
    } else {
        bound
    }
}

/// Renews the lease every third of `ttl`; after a failure, tries again
/// sooner (every tenth), so one failed renewal does not let it run out.
async fn renew(directory: ClientDirectory, peer: PeerId, entry: PeerEntry, ttl: Duration) {
    let mut wait = ttl / 3;
    loop {
        tokio::time::sleep(wait).await;
        wait = match directory.register(peer, &entry, ttl).await {
            Ok(()) => ttl / 3,
            Err(error) => {
                warn!(%error, %peer, "renewing the peer lease failed; trying again");
                ttl / 10
            }
        };
    }
}

impl<C: Codec> ProsodyClient<C> {
    /// Sends `payload` to `topic` as a request to `subsystems` and waits up
    /// to `timeout` for their answers: one [`Outcome`] per subsystem named
    /// (duplicates count once), keyed by its name. An answer is the
    /// subsystem's handler's return value, decoded as a `T` (its JSON
    /// form); a subsystem that does not answer in time is a
    /// [`ResponseError::Timeout`].
    ///
    /// The client needs no subscription to send requests. A handler that
    /// awaits a request its own group must handle for the same key waits
    /// until the timeout: its key runs one event at a time.
    ///
    /// # Errors
    ///
    /// [`ClientError::InvalidRequest`] for no subsystem, an invalid name or
    /// a zero timeout; [`ClientError::Encode`], [`ClientError::Broker`] when
    /// the record cannot be sent; [`ClientError::ShutDown`] after
    /// shutdown; [`ClientError::Peer`] when the peer endpoint cannot start.
    ///
    /// [`Outcome`]: prosody_request::Outcome
    /// [`ResponseError::Timeout`]: prosody_request::ResponseError::Timeout
    pub async fn request<T, I, N>(
        &self,
        topic: &str,
        key: impl Into<Key>,
        payload: &C::Value,
        subsystems: I,
        timeout: Duration,
    ) -> Result<Outcomes<T>, ClientError>
    where
        T: DeserializeOwned,
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        self.check_open()?;
        let bytes = self
            .inner
            .codec
            .encode(payload)
            .map_err(|source| ClientError::Encode {
                topic: topic.to_owned(),
                source,
            })?;
        let key: Key = key.into();
        let record = OutgoingRecord::new(topic, key.as_bytes().to_vec(), bytes);
        self.ask(record, subsystems, timeout).await
    }

    /// The peer id the answers to this client's requests are addressed to
    /// (it registers in the peer directory under it): `None` until its
    /// first request, then the same for the client's life.
    #[must_use]
    pub fn peer_id(&self) -> Option<PeerId> {
        self.inner.requests.peer()
    }

    /// Sends an excise record for `key` to `topic` as a request to
    /// `subsystems`, answered by their `on_excise`; otherwise as
    /// [`request`](Self::request).
    ///
    /// # Errors
    ///
    /// As [`request`](Self::request).
    pub async fn request_excise<T, I, N>(
        &self,
        topic: &str,
        key: impl Into<Key>,
        subsystems: I,
        timeout: Duration,
    ) -> Result<Outcomes<T>, ClientError>
    where
        T: DeserializeOwned,
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        self.check_open()?;
        let key: Key = key.into();
        let record = OutgoingRecord::tombstone(topic, key.as_bytes().to_vec());
        self.ask(record, subsystems, timeout).await
    }

    async fn ask<T, I, N>(
        &self,
        record: OutgoingRecord,
        subsystems: I,
        timeout: Duration,
    ) -> Result<Outcomes<T>, ClientError>
    where
        T: DeserializeOwned,
        I: IntoIterator<Item = N>,
        N: AsRef<str>,
    {
        if timeout.is_zero() {
            return Err(ClientError::InvalidRequest(
                "the timeout must be longer than zero".to_owned(),
            ));
        }
        let deadline = Instant::now() + timeout;
        let inbox = self.inner.requests.inbox().await?;
        let id = RequestId::random().map_err(|error| ClientError::Peer(error.to_string()))?;
        let asked = Asked::new(id, inbox.peer(), subsystems)
            .map_err(|error| ClientError::InvalidRequest(error.to_string()))?;
        // Waiting before the record is sent: an answer may come at once.
        let waiter = inbox.wait(&asked);
        self.produce(record, Some(&asked)).await?;
        Ok(waiter.collect(deadline).await)
    }
}
