//! The peer endpoint: where answering members in other processes deliver
//! their replies to this process's [`Inbox`].
//!
//! It speaks cleartext HTTP/2 with prior knowledge (h2c) and accepts only
//! `POST /prosody/v1/reply` whose body is an encoded [`Reply`]. The peer
//! network is trusted: there is no TLS and no authentication, and a reply
//! is only delivered to a request that waits for its 128-bit random id.
//!
//! | answer | when |
//! | --- | --- |
//! | `202 Accepted` | the reply was handed to the request waiting for it |
//! | `404 Not Found` | no request waits for it, or another path |
//! | `400 Bad Request` | the body is not a reply |
//! | `405 Method Not Allowed` | not a `POST` |
//! | `408 Request Timeout` | the body took longer than 10 s to arrive |
//! | `413 Payload Too Large` | the body is longer than [`MAX_REPLY_BYTES`] |
//!
//! Whatever peers send, what it holds is bounded: 1024 connections (more
//! are closed as soon as accepted), 64 requests open on each, 64 bodies
//! being read at once, 16 KiB of headers a request. Each connection is
//! pinged every 20 s and closed when the peer does not answer, or sends
//! nothing for a minute.

mod refusals;
pub use refusals::{Refusal, Refusals};

use crate::inbox::{Inbox, Receipt};
use crate::wire::{MAX_REPLY_BYTES, Reply};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, LengthLimitError, Limited};
use hyper::body::{Body, Incoming};
use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, warn};

/// The path replies are posted to.
pub const REPLY_PATH: &str = "/prosody/v1/reply";

/// Requests open at once on one connection. A [`Sender`](crate::Sender)
/// opens no more than this before the endpoint's settings arrive, so none
/// of its requests is refused for it.
pub(crate) const MAX_STREAMS: u32 = 64;

/// The wait after a failed accept (out of file descriptors, say).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// What the endpoint allows a peer, and how long it waits for one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Connections served at once; more are closed as soon as accepted.
    pub(crate) connections: usize,
    /// Requests open at once on one connection.
    pub(crate) streams: u32,
    /// Bodies read at once over all connections, each at most
    /// [`MAX_REPLY_BYTES`]: what bounds the memory peers can make it hold.
    pub(crate) reading: usize,
    /// How long a request's body may take to arrive.
    pub(crate) body: Duration,
    /// How often a connection is pinged, and how long a ping's answer may
    /// take before the connection is closed.
    pub(crate) keep_alive: Duration,
    /// How long a connection may go without the peer sending a byte (it
    /// answers each keep-alive ping, so only a silent peer is cut).
    pub(crate) idle: Duration,
    /// How long shutting down waits for requests in flight.
    pub(crate) grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connections: 1024,
            streams: MAX_STREAMS,
            reading: 64,
            body: Duration::from_secs(10),
            keep_alive: Duration::from_secs(20),
            idle: Duration::from_secs(60),
            grace: Duration::from_secs(2),
        }
    }
}

/// A peer endpoint serving replies into one [`Inbox`].
///
/// Invariant: while it lives (until [`shutdown`](Endpoint::shutdown) or
/// drop) it listens on [`local_addr`](Endpoint::local_addr), serves each
/// connection in its own task, and holds at most 1024 connections, 64
/// open requests on each, and 64 bodies of at most [`MAX_REPLY_BYTES`]
/// being read, whatever peers send;
/// every request it does not deliver or drop is counted in
/// [`refused`](Endpoint::refused).
#[derive(Debug)]
pub struct Endpoint {
    address: SocketAddr,
    counts: Arc<Counts>,
    /// Stops the accept loop when the endpoint is dropped.
    stop: DropGuard,
    serving: JoinHandle<()>,
}

/// The peer endpoint cannot start.
///
/// Invariant: it names the address asked for, or the step that failed,
/// with what the system said; no endpoint is left running.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// The address cannot be bound (in use, not permitted, not local).
    #[error("cannot bind the peer endpoint to {address}: {source}")]
    Bind {
        /// The address asked for.
        address: SocketAddr,
        /// What the system said.
        source: io::Error,
    },
    /// The bound socket's address cannot be read.
    #[error("cannot read the address the peer endpoint is bound to: {0}")]
    LocalAddr(io::Error),
}

#[derive(Debug, Default)]
struct Counts {
    refused: AtomicU64,
    connections: AtomicU64,
    refusals: Refusals,
}

impl Endpoint {
    /// Binds `address` (port 0 = any) and serves replies into `inbox`
    /// until shut down. It must be called within a tokio runtime, whose
    /// tasks serve the connections.
    ///
    /// # Errors
    ///
    /// [`EndpointError::Bind`] when the address cannot be bound.
    pub async fn bind(address: SocketAddr, inbox: Arc<Inbox>) -> Result<Self, EndpointError> {
        Self::bind_with(address, inbox, Limits::default()).await
    }

    pub(crate) async fn bind_with(
        address: SocketAddr,
        inbox: Arc<Inbox>,
        limits: Limits,
    ) -> Result<Self, EndpointError> {
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| EndpointError::Bind { address, source })?;
        let bound = listener.local_addr().map_err(EndpointError::LocalAddr)?;
        let counts = Arc::new(Counts::default());
        let stop = CancellationToken::new();
        let shared = Shared {
            inbox,
            counts: Arc::clone(&counts),
            reading: Arc::new(Semaphore::new(limits.reading)),
            limits,
        };
        let serving = tokio::spawn(accept(listener, Arc::new(shared), stop.clone()));
        debug!(address = %bound, "peer endpoint listening");
        Ok(Self {
            address: bound,
            counts,
            stop: stop.drop_guard(),
            serving,
        })
    }

    /// The address the endpoint listens on.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Requests refused (malformed, oversized, too slow, wrong path or
    /// method). A reply nobody waits for is not refused: the inbox counts
    /// it in [`Inbox::dropped`].
    #[must_use]
    pub fn refused(&self) -> u64 {
        self.counts.refused.load(Ordering::Relaxed)
    }

    /// Its refusals by reason, connections over the limit included; the
    /// handle outlives the endpoint.
    #[must_use]
    pub fn refusals(&self) -> Refusals {
        self.counts.refusals.clone()
    }

    /// Connections accepted and served so far (not those closed at once
    /// for being over the limit).
    #[must_use]
    pub fn connections(&self) -> u64 {
        self.counts.connections.load(Ordering::Relaxed)
    }

    /// Stops accepting and ends open connections: each is told to go away
    /// (HTTP/2 `GOAWAY`), and requests in flight get a short grace before
    /// their connections are cut. When it returns the port is closed.
    pub async fn shutdown(self) {
        self.stop.disarm().cancel();
        if let Err(error) = self.serving.await {
            warn!(%error, "peer endpoint: the accept loop failed");
        }
    }
}

/// What every connection's task shares.
struct Shared {
    inbox: Arc<Inbox>,
    counts: Arc<Counts>,
    reading: Arc<Semaphore>,
    limits: Limits,
}

async fn accept(listener: TcpListener, shared: Arc<Shared>, stop: CancellationToken) {
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                warn!(%error, "peer endpoint: accepting a connection failed");
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                }
            }
        };
        if connections.len() >= shared.limits.connections {
            shared.counts.refusals.add(Refusal::Connections);
            debug!("peer endpoint: too many connections; one closed");
            continue;
        }
        shared.counts.connections.fetch_add(1, Ordering::Relaxed);
        connections.spawn(serve(stream, Arc::clone(&shared), stop.clone()));
    }
    drop(listener);
    let grace = shared.limits.grace;
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(grace, drained).await.is_err() {
        debug!("peer endpoint: connections still open after the grace; cut");
    }
    connections.shutdown().await;
}

/// Serves one connection until it ends, goes silent, or the endpoint stops.
async fn serve(stream: TcpStream, shared: Arc<Shared>, stop: CancellationToken) {
    let _ = stream.set_nodelay(true);
    let limits = shared.limits;
    let heard = Arc::new(Heard::new());
    let io = TokioIo::new(Watched {
        stream,
        heard: Arc::clone(&heard),
    });
    let service = service_fn(move |request| {
        let shared = Arc::clone(&shared);
        async move { Ok::<_, Infallible>(respond(request, &shared).await) }
    });
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.streams)
        .max_header_list_size(16 * 1024)
        .keep_alive_interval(Some(limits.keep_alive))
        .keep_alive_timeout(limits.keep_alive);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    loop {
        let silent_until = heard.last() + limits.idle;
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(error) = served {
                    debug!(%error, "peer endpoint: a connection failed");
                }
                return;
            }
            () = tokio::time::sleep_until(silent_until) => {
                if heard.last() + limits.idle <= Instant::now() {
                    debug!("peer endpoint: a silent connection closed");
                    return;
                }
            }
            () = stop.cancelled() => break,
        }
    }
    connection.as_mut().graceful_shutdown();
    if let Err(error) = connection.await {
        debug!(%error, "peer endpoint: a connection failed while closing");
    }
}

/// What became of one request, and so its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Delivered,
    Dropped,
    Refused(StatusCode),
}

async fn respond(request: Request<Incoming>, shared: &Shared) -> Response<Empty<Bytes>> {
    let status = match judge(request, shared).await {
        Verdict::Delivered => StatusCode::ACCEPTED,
        Verdict::Dropped => StatusCode::NOT_FOUND,
        Verdict::Refused(status) => {
            shared.counts.refused.fetch_add(1, Ordering::Relaxed);
            shared.counts.refusals.add(Refusal::of(status));
            debug!(%status, "peer endpoint: a request refused");
            status
        }
    };
    let mut response = Response::new(Empty::new());
    *response.status_mut() = status;
    response
}

async fn judge(request: Request<Incoming>, shared: &Shared) -> Verdict {
    if request.uri().path() != REPLY_PATH {
        return Verdict::Refused(StatusCode::NOT_FOUND);
    }
    if request.method() != Method::POST {
        return Verdict::Refused(StatusCode::METHOD_NOT_ALLOWED);
    }
    // A stated length over the limit is refused before a byte is read.
    let limit = u64::try_from(MAX_REPLY_BYTES).unwrap_or(u64::MAX);
    if request.body().size_hint().lower() > limit {
        return Verdict::Refused(StatusCode::PAYLOAD_TOO_LARGE);
    }
    let Ok(_reading) = shared.reading.acquire().await else {
        return Verdict::Refused(StatusCode::SERVICE_UNAVAILABLE);
    };
    let body = Limited::new(request.into_body(), MAX_REPLY_BYTES).collect();
    let bytes = match tokio::time::timeout(shared.limits.body, body).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.is::<LengthLimitError>() => {
            return Verdict::Refused(StatusCode::PAYLOAD_TOO_LARGE);
        }
        Ok(Err(error)) => {
            debug!(%error, "peer endpoint: a request's body failed");
            return Verdict::Refused(StatusCode::BAD_REQUEST);
        }
        Err(_) => return Verdict::Refused(StatusCode::REQUEST_TIMEOUT),
    };
    match Reply::decode(&bytes) {
        Ok(reply) => match shared.inbox.deliver(reply) {
            Receipt::Delivered => Verdict::Delivered,
            Receipt::Dropped => Verdict::Dropped,
        },
        Err(error) => {
            debug!(%error, "peer endpoint: a body that is not a reply");
            Verdict::Refused(StatusCode::BAD_REQUEST)
        }
    }
}

/// When a connection's peer last sent a byte, in milliseconds since the
/// connection opened.
#[derive(Debug)]
struct Heard {
    opened: Instant,
    millis: AtomicU64,
}

impl Heard {
    fn new() -> Self {
        Self {
            opened: Instant::now(),
            millis: AtomicU64::new(0),
        }
    }

    fn now(&self) {
        let millis = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.millis.store(millis, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.opened + Duration::from_millis(self.millis.load(Ordering::Relaxed))
    }
}

/// A connection's stream, noting when the peer last sent something.
struct Watched {
    stream: TcpStream,
    heard: Arc<Heard>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.heard.now();
        }
        read
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
