//! Requests to named subsystems: a client sends a record and waits for the
//! answers of the subsystems it names (see the README's Requests section).

use crate::config::PeerSettings;
use crate::config::default_interface;
use crate::directory::ClientDirectory;
use crate::error::ClientError;
use crate::reply::Responder;
use crate::send::Sender;
use prosody_core::broker::OutgoingRecord;
use prosody_core::peer::{Asked, PeerEntry, PeerId, RequestId};
use prosody_core::runtime::Answerer;
use prosody_core::store::PeerDirectory;
use prosody_core::{Codec, Key};
use prosody_request::{
    Endpoint, Inbox, Outcome, Outcomes, Peers, Refusal, Refusals, ResponseError,
};
use serde::de::DeserializeOwned;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, OnceCell};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
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
/// shuts down (or is dropped: the renewal stops with it), which deletes the
/// entry and closes the endpoint. Once closed, no endpoint opens again.
#[derive(Debug)]
pub(crate) struct Requests {
    settings: PeerSettings,
    directory: Option<ClientDirectory>,
    route: Arc<Peers<ClientDirectory>>,
    /// The answers being sent to requesters in other processes, waited
    /// for at shutdown.
    sending: TaskTracker,
    receiver: OnceCell<Receiver>,
    /// What shutdown closes: the endpoint and its lease.
    listening: Mutex<Listening>,
    /// Whether the records outlive this process (a durable broker), so
    /// answers from other processes are expected: then the lack of a
    /// directory is warned of, once.
    durable: bool,
    said_local: std::sync::Once,
    /// The endpoint's refusals, once it is bound (it is bound at most
    /// once).
    refusals: std::sync::OnceLock<Refusals>,
}

#[derive(Debug)]
struct Receiver {
    inbox: Arc<Inbox>,
}

/// The endpoint's state.
#[derive(Debug, Default)]
enum Listening {
    /// Not bound (no request yet, or no directory).
    #[default]
    Idle,
    /// Bound and registered under a lease.
    Open(Registered),
    /// Shut down: nothing opens again.
    Closed,
}

/// A peer endpoint, registered under a lease renewed until it is dropped.
#[derive(Debug)]
struct Registered {
    endpoint: Endpoint,
    renew: AbortOnDrop,
    directory: ClientDirectory,
    peer: PeerId,
}

/// A task aborted when this is dropped.
#[derive(Debug)]
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Requests {
    pub(crate) fn new(
        settings: PeerSettings,
        directory: Option<ClientDirectory>,
        send_timeout: Duration,
        durable: bool,
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
            sending: TaskTracker::new(),
            receiver: OnceCell::new(),
            listening: Mutex::new(Listening::Idle),
            durable,
            said_local: std::sync::Once::new(),
            refusals: std::sync::OnceLock::new(),
        }
    }

    /// Answers dropped by the client's inbox.
    pub(crate) fn dropped(&self) -> u64 {
        self.receiver
            .get()
            .map_or(0, |receiver| receiver.inbox.dropped())
    }

    /// Answers being sent to requesters now.
    pub(crate) fn sending(&self) -> usize {
        self.sending.len()
    }

    /// The peer endpoint's refusals for `reason` (0 before it is bound).
    pub(crate) fn refused(&self, reason: Refusal) -> u64 {
        self.refusals
            .get()
            .map_or(0, |refusals| refusals.count(reason))
    }

    /// The peer id of the client's inbox, once opened.
    pub(crate) fn peer(&self) -> Option<PeerId> {
        self.receiver.get().map(|receiver| receiver.inbox.peer())
    }

    /// How the client answers as its subsystem, if it has one: its
    /// answers take this client's route, and shutdown waits for their
    /// sends.
    pub(crate) fn answerer(&self) -> Option<Arc<dyn Answerer>> {
        self.settings.subsystem.clone().map(|subsystem| {
            let responder =
                Responder::new(subsystem, Arc::clone(&self.route), self.sending.clone());
            Arc::new(responder) as Arc<dyn Answerer>
        })
    }

    /// The client's inbox, opened on first use: with a directory, behind a
    /// registered endpoint.
    async fn inbox(&self) -> Result<&Arc<Inbox>, ClientError> {
        let receiver = self
            .receiver
            .get_or_try_init(|| async {
                let peer = PeerId::random().map_err(|error| ClientError::Peer(error.to_string()))?;
                let inbox = Inbox::open(peer);
                match &self.directory {
                    Some(directory) => {
                        let registered = self.listen(directory, &inbox).await?;
                        let mut listening = self.listening.lock().await;
                        if matches!(*listening, Listening::Closed) {
                            // Shut down meanwhile: leave nothing behind.
                            drop(listening);
                            close(registered, Instant::now() + DEREGISTER_TIMEOUT).await;
                            return Err(ClientError::ShutDown);
                        }
                        *listening = Listening::Open(registered);
                    }
                    None if self.durable => self.said_local.call_once(|| {
                        warn!("no peer directory (the stores are not Cassandra's): requests are answered only by members in this process");
                    }),
                    None => {}
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
    ) -> Result<Registered, ClientError> {
        let peer = inbox.peer();
        let endpoint = Endpoint::bind(self.settings.bind_address(), Arc::clone(inbox))
            .await
            .map_err(|error| ClientError::Peer(error.to_string()))?;
        let _ = self.refusals.set(endpoint.refusals());
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
        let renew = AbortOnDrop(tokio::spawn(renew(directory.clone(), peer, entry, ttl)));
        Ok(Registered {
            endpoint,
            renew,
            directory: directory.clone(),
            peer,
        })
    }

    /// Waits for the answers being sent until `deadline`, then deletes
    /// the client's directory entry (until `deadline`, and at most 5 s) and
    /// closes its endpoint (until `deadline`; past it the endpoint ends in
    /// the background); no endpoint opens afterwards.
    pub(crate) async fn close(&self, deadline: Instant) {
        self.sending.close();
        if tokio::time::timeout_at(deadline, self.sending.wait())
            .await
            .is_err()
        {
            warn!(
                answers = self.sending.len(),
                "answers still being sent at shutdown_timeout were abandoned"
            );
        }
        let listening = std::mem::replace(&mut *self.listening.lock().await, Listening::Closed);
        if let Listening::Open(registered) = listening {
            close(registered, deadline).await;
        }
    }
}

#[cfg(test)]
impl Requests {
    /// The route of this client's answers, and the tracker of their sends.
    pub(crate) fn route(&self) -> (&Arc<Peers<ClientDirectory>>, &TaskTracker) {
        (&self.route, &self.sending)
    }

    /// Registers an endpoint in `directory`, as the first request does in
    /// the stores' directory.
    pub(crate) async fn listen_in(&self, directory: &ClientDirectory) -> Result<(), ClientError> {
        let peer = PeerId::random().map_err(|error| ClientError::Peer(error.to_string()))?;
        let registered = self.listen(directory, &Inbox::open(peer)).await?;
        *self.listening.lock().await = Listening::Open(registered);
        Ok(())
    }
}

/// Deletes `registered`'s entry (until `deadline`, and at most
/// [`DEREGISTER_TIMEOUT`]: it runs out with its lease otherwise) and closes
/// its endpoint (waiting until `deadline` at most).
async fn close(registered: Registered, deadline: Instant) {
    drop(registered.renew);
    let deregister = registered.directory.deregister(registered.peer);
    let until = deadline.min(Instant::now() + DEREGISTER_TIMEOUT);
    match tokio::time::timeout_at(until, deregister).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => warn!(%error, "deleting the peer entry failed; its lease runs out"),
        Err(_) => warn!("deleting the peer entry timed out; its lease runs out"),
    }
    if tokio::time::timeout_at(deadline, registered.endpoint.shutdown())
        .await
        .is_err()
    {
        debug!("the peer endpoint did not close by shutdown_timeout; it ends in the background");
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

/// Renews the lease every third of `ttl`, each try bounded by a third;
/// after a failure, tries again sooner (every tenth), so one failed renewal
/// does not let it run out.
async fn renew(directory: ClientDirectory, peer: PeerId, entry: PeerEntry, ttl: Duration) {
    let mut wait = ttl / 3;
    loop {
        tokio::time::sleep(wait).await;
        let renewed = tokio::time::timeout(ttl / 3, directory.register(peer, &entry, ttl)).await;
        wait = match renewed {
            Ok(Ok(())) => ttl / 3,
            Ok(Err(error)) => {
                warn!(%error, %peer, "renewing the peer lease failed; trying again");
                ttl / 10
            }
            Err(_) => {
                warn!(%peer, "renewing the peer lease timed out; trying again");
                ttl / 10
            }
        };
    }
}

impl Requests {
    /// Sends `payload` to `topic` under `key` through `sender`, as a
    /// request to `subsystems`, and waits up to `timeout` for their
    /// answers (the body of the client's `request`).
    pub(crate) async fn request<C: Codec, T: DeserializeOwned>(
        &self,
        sender: &Sender<C>,
        topic: &str,
        key: Key,
        payload: &C::Value,
        subsystems: &[&str],
        timeout: Duration,
    ) -> Result<Outcomes<T>, ClientError> {
        sender.check_open()?;
        let record = sender.encode(topic, &key, payload)?;
        self.ask(sender, record, subsystems, timeout).await
    }

    /// Sends an excise record for `key` to `topic` through `sender`, as a
    /// request to `subsystems`; otherwise as [`Requests::request`].
    pub(crate) async fn request_excise<C: Codec, T: DeserializeOwned>(
        &self,
        sender: &Sender<C>,
        topic: &str,
        key: Key,
        subsystems: &[&str],
        timeout: Duration,
    ) -> Result<Outcomes<T>, ClientError> {
        sender.check_open()?;
        let record = OutgoingRecord::tombstone(topic, key.as_bytes().to_vec());
        self.ask(sender, record, subsystems, timeout).await
    }

    /// Sends `record` through `sender` as a request to `subsystems` and
    /// collects their answers until `timeout`, each recorded in the
    /// sender's metrics.
    async fn ask<C: Codec, T: DeserializeOwned>(
        &self,
        sender: &Sender<C>,
        record: OutgoingRecord,
        subsystems: &[&str],
        timeout: Duration,
    ) -> Result<Outcomes<T>, ClientError> {
        if timeout.is_zero() {
            return Err(ClientError::InvalidRequest(
                "the timeout must be longer than zero".to_owned(),
            ));
        }
        // A timeout past any clock's reach waits a year.
        let now = Instant::now();
        let deadline = now
            .checked_add(timeout)
            .unwrap_or(now + Duration::from_secs(365 * 24 * 3600));
        let id = RequestId::random().map_err(|error| ClientError::Peer(error.to_string()))?;
        // Checked before anything opens: a bad name is the caller's error.
        let asked = Asked::new(id, PeerId::from_bytes([0; 16]), subsystems)
            .map_err(|error| ClientError::InvalidRequest(error.to_string()))?;
        let inbox = tokio::time::timeout_at(deadline, self.inbox())
            .await
            .map_err(|_| {
                ClientError::Peer("the peer endpoint did not open before the deadline".to_owned())
            })??;
        let asked = asked.with_reply_to(inbox.peer());
        // Waiting before the record is sent: an answer may come at once.
        let waiter = inbox.wait(&asked);
        sender.produce(record, Some(&asked)).await?;
        let metrics = sender.metrics();
        let outcomes = waiter
            .collect_with(deadline, |subsystem, outcome: &Outcome<T>, after| {
                let name = match outcome {
                    Outcome::Success(_) => "success",
                    Outcome::Failure(ResponseError::HandlerFailed { .. }) => "handler_failed",
                    Outcome::Failure(ResponseError::Timeout) => "timeout",
                    Outcome::Failure(ResponseError::FormatMismatch { .. }) => "format_mismatch",
                    Outcome::Failure(ResponseError::MalformedResponse { .. }) => {
                        "malformed_response"
                    }
                    Outcome::Failure(_) => "failed",
                };
                metrics.requested(subsystem, name, after);
            })
            .await;
        Ok(outcomes)
    }
}
