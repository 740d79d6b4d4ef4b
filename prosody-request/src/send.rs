//! The sending side of the peer network: an answering member posts its
//! [`Reply`] to the requester's peer endpoint.
//!
//! A [`Sender`] keeps one cleartext HTTP/2 connection per peer and sends
//! every reply to that peer over it, many at once as streams of the one
//! connection; a connection unused for a minute is closed, and so is the
//! least recently used peer's when more peers than the capacity are
//! talked to.

use crate::endpoint::{MAX_STREAMS, REPLY_PATH};
use crate::inbox::Receipt;
use crate::wire::Reply;
use bytes::Bytes;
use http_body_util::Full;
use hyper::http::uri::{Authority, Uri};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::collections::HashMap;
use std::error::Error as _;
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How long a connection to a peer stays open unused.
const IDLE: Duration = Duration::from_secs(60);

/// How long connecting to a peer may take, whatever a send allows.
const CONNECT: Duration = Duration::from_secs(10);

/// How often a connection is pinged, and how long a ping's answer may take
/// before the connection is given up.
const KEEP_ALIVE: Duration = Duration::from_secs(20);

/// The connection to one peer: a client whose pool holds at most one.
type PeerClient = Client<HttpConnector, Full<Bytes>>;

/// Sends replies to peer endpoints.
///
/// Invariant: it keeps connections to at most `capacity` peers, at most
/// one each (HTTP/2 carries every request to a peer at once), each closed
/// after a minute unused; clones share them.
#[derive(Clone)]
pub struct Sender {
    peers: Arc<Mutex<Peers>>,
}

/// The peers talked to, least recently used first out.
struct Peers {
    capacity: NonZeroUsize,
    /// Each peer's client, with when it was last used.
    clients: HashMap<String, (PeerClient, u64)>,
    clock: u64,
}

/// A reply that was not delivered or dropped by the peer.
///
/// Invariant: each names the address it was sent to, and falls in one
/// category: the address is not one, the peer was not reached in time
/// ([`is_unreachable`](SendError::is_unreachable)), or the peer answered
/// and refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The address is not a `host:port`.
    #[error("{address:?} is not a peer address (host:port): {problem}")]
    Address {
        /// The address given.
        address: String,
        /// What is wrong with it.
        problem: String,
    },
    /// No connection to the peer could be made, or it was lost before the
    /// peer answered: the peer is gone or the network is down.
    #[error("cannot reach the peer endpoint at {address}: {problem}")]
    Unreachable {
        /// The peer's address.
        address: String,
        /// What failed.
        problem: String,
    },
    /// The peer did not answer within the time allowed.
    #[error("the peer endpoint at {address} did not answer within {timeout:?}")]
    Timeout {
        /// The peer's address.
        address: String,
        /// The time allowed.
        timeout: Duration,
    },
    /// The peer answered, refusing the reply (malformed, too large, or
    /// not an endpoint of this protocol).
    #[error("the peer endpoint at {address} refused the reply with {status}")]
    Refused {
        /// The peer's address.
        address: String,
        /// The HTTP status it answered.
        status: u16,
    },
}

impl SendError {
    /// Whether the peer could not be reached in time
    /// ([`Unreachable`](SendError::Unreachable) or
    /// [`Timeout`](SendError::Timeout)), as opposed to a peer that answered
    /// and refused, or an address that is not one.
    #[must_use]
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::Timeout { .. })
    }
}

impl fmt::Debug for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let peers = lock(&self.peers);
        f.debug_struct("Sender")
            .field("capacity", &peers.capacity)
            .field("peers", &peers.clients.len())
            .finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Sender {
    /// A sender keeping connections to at most `capacity` peers.
    #[must_use]
    pub fn new(capacity: NonZeroUsize) -> Self {
        Self {
            peers: Arc::new(Mutex::new(Peers {
                capacity,
                clients: HashMap::new(),
                clock: 0,
            })),
        }
    }

    /// Sends `reply` to the endpoint at `address` (`host:port`), within
    /// `timeout` (connecting included). It must be called within a tokio
    /// runtime, whose tasks drive the connections.
    ///
    /// # Errors
    ///
    /// [`SendError::Unreachable`] or [`SendError::Timeout`] when the peer
    /// cannot be reached in time, [`SendError::Refused`] when it answers
    /// other than delivered or dropped, [`SendError::Address`] when
    /// `address` is not a `host:port`.
    pub async fn send(
        &self,
        address: &str,
        reply: &Reply,
        timeout: Duration,
    ) -> Result<Receipt, SendError> {
        let request = request(address, reply)?;
        let client = self.client(address);
        let response = match tokio::time::timeout(timeout, client.request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                return Err(SendError::Unreachable {
                    address: address.to_owned(),
                    problem: chain(&error),
                });
            }
            Err(_) => {
                return Err(SendError::Timeout {
                    address: address.to_owned(),
                    timeout,
                });
            }
        };
        match response.status() {
            StatusCode::ACCEPTED => Ok(Receipt::Delivered),
            StatusCode::NOT_FOUND => Ok(Receipt::Dropped),
            status => Err(SendError::Refused {
                address: address.to_owned(),
                status: status.as_u16(),
            }),
        }
    }

    /// The client of the peer at `address`, made (and the least recently
    /// used peer's dropped, beyond the capacity) if there is none.
    fn client(&self, address: &str) -> PeerClient {
        let mut peers = lock(&self.peers);
        peers.clock += 1;
        let now = peers.clock;
        if let Some((client, used)) = peers.clients.get_mut(address) {
            *used = now;
            return client.clone();
        }
        if peers.clients.len() >= peers.capacity.get() {
            let oldest = peers
                .clients
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(address, _)| address.clone());
            if let Some(oldest) = oldest {
                peers.clients.remove(&oldest);
            }
        }
        let client = connect();
        peers
            .clients
            .insert(address.to_owned(), (client.clone(), now));
        client
    }
}

/// A client holding at most one HTTP/2 connection, to the one peer it is
/// used for.
fn connect() -> PeerClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(CONNECT));
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .http2_initial_max_send_streams(usize::try_from(MAX_STREAMS).unwrap_or(usize::MAX))
        .pool_max_idle_per_host(1)
        .pool_idle_timeout(IDLE)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(KEEP_ALIVE)
        .http2_keep_alive_timeout(KEEP_ALIVE)
        .build(connector)
}

/// The request posting `reply` to the endpoint at `address`.
fn request(address: &str, reply: &Reply) -> Result<Request<Full<Bytes>>, SendError> {
    let invalid = |problem: String| SendError::Address {
        address: address.chars().take(256).collect(),
        problem,
    };
    let authority: Authority = address
        .parse()
        .map_err(|error: hyper::http::uri::InvalidUri| invalid(error.to_string()))?;
    if authority.port().is_none() || authority.as_str().contains('@') {
        return Err(invalid("it must be host:port".to_owned()));
    }
    let uri = Uri::builder()
        .scheme("http")
        .authority(authority)
        .path_and_query(REPLY_PATH)
        .build()
        .map_err(|error| invalid(error.to_string()))?;
    let mut request = Request::new(Full::new(reply.encode()));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri;
    Ok(request)
}

/// An error with its sources, as one line.
fn chain(error: &hyper_util::client::legacy::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
