//! Health probes for an orchestrator: an HTTP server answering
//!
//! - `GET /readyz`: `200` when the client holds at least one partition,
//!   else `503`; the `200` body names the partitions assigned, then one
//!   line per partition held with what the operator should see of it
//!   ([`Health::partition_details`]: the facade lists each partition's
//!   deferred keys and records);
//! - `GET /livez`: `200` unless the client reports a liveness problem (a
//!   partition with work pending made no progress for the stall threshold,
//!   a halted partition, a consumer that stopped), else `503` with the
//!   problems in the body, one per line;
//! - `GET /metrics`: the metrics in the Prometheus text format (version
//!   0.0.4), `200` with `content-type: text/plain; version=0.0.4;
//!   charset=utf-8`; `503` with the reason when they cannot be read now;
//!   `404` when the [`Health`] serves none (see [`Health::metrics`]).
//!
//! `HEAD` answers as `GET` without the body; any other method is `405`,
//! and any other path `404`. The server reads its answers from a
//! [`Health`] at each request, so the endpoints and the client's own
//! methods agree.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// How long a connection may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections served at once; more are closed at once.
const MAX_CONNECTIONS: usize = 64;

/// The wait after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The content type of `/metrics`: the Prometheus text format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the probes report; asked at each request. The answers are futures
/// so that an implementation can compute them on the client's own runtime
/// (and its clock).
pub trait Health: Send + Sync + 'static {
    /// How many partitions the client holds now.
    fn assigned_partitions(&self) -> impl Future<Output = usize> + Send;

    /// What keeps the client from being live, one line each; empty when
    /// live.
    fn liveness_problems(&self) -> impl Future<Output = Vec<String>> + Send;

    /// One line per partition held, for the body of a `200` from
    /// `/readyz` (after the count of partitions); none by default. Lines
    /// hold no line break.
    fn partition_details(&self) -> impl Future<Output = Vec<String>> + Send {
        std::future::ready(Vec::new())
    }

    /// The metrics for `GET /metrics`; `None` (the default) when this
    /// health serves none, answered `404`.
    ///
    /// The future is polled on the probe server's own thread: work done in
    /// it (collecting and encoding) takes no time from the application's
    /// runtime, and holds up only other probes while it runs.
    fn metrics(&self) -> impl Future<Output = Option<Exposition>> + Send {
        std::future::ready(None)
    }
}

/// The answer to `GET /metrics`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exposition {
    /// The metrics in the Prometheus text format (version 0.0.4): `200`
    /// with [`METRICS_CONTENT_TYPE`].
    Text(String),
    /// Why the metrics cannot be read now (one line): `503`.
    Unavailable(String),
}

/// A running probe server, on a thread of its own with its own small
/// runtime: it needs nothing of the application's runtime (not even its I/O
/// driver). Requests wait at most 5 s for their headers, and at most 64
/// connections are served at once.
///
/// Invariant: after [`ProbeServer::stop`] returns, the port is closed and
/// no request is served; dropping the server stops it too (without
/// waiting).
#[derive(Debug)]
pub struct ProbeServer {
    address: SocketAddr,
    stop: CancellationToken,
    /// Answers when the server's thread is done.
    done: Option<oneshot::Receiver<()>>,
}

impl ProbeServer {
    /// Listens on `port` of every interface (0 picks a free port) and
    /// serves `health`.
    ///
    /// Every interface is IPv6 and IPv4 where the host has IPv6, else IPv4.
    ///
    /// # Errors
    ///
    /// The port cannot be bound (in use, or not permitted), or the server's
    /// thread cannot be made.
    pub fn start(port: u16, health: impl Health) -> io::Result<Self> {
        let listener = std::net::TcpListener::bind(SocketAddr::from(([0u16; 8], port)))
            .or_else(|_| std::net::TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))))?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let stop = CancellationToken::new();
        let (finished, done) = oneshot::channel();
        let serving = stop.clone();
        std::thread::Builder::new()
            .name("prosody-probe".to_owned())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .enable_time()
                    .build();
                match runtime {
                    Ok(runtime) => runtime.block_on(async move {
                        match TcpListener::from_std(listener) {
                            Ok(listener) => serve(listener, Arc::new(health), serving).await,
                            Err(error) => warn!(%error, "probe server: the listener failed"),
                        }
                    }),
                    Err(error) => warn!(%error, "probe server: its runtime could not start"),
                }
                let _ = finished.send(());
            })?;
        debug!(%address, "probe server listening");
        Ok(Self {
            address,
            stop,
            done: Some(done),
        })
    }

    /// Where the server listens.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Stops accepting, ends open connections, and waits until the server
    /// is gone.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(done) = self.done.take() {
            let _ = done.await;
        }
    }
}

impl Drop for ProbeServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve<H: Health>(listener: TcpListener, health: Arc<H>, stop: CancellationToken) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of file descriptors, say: wait rather than spin.
                warn!(%error, "probe server: accepting a connection failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        if connections.len() >= MAX_CONNECTIONS {
            debug!("probe server: too many connections; one refused");
            continue;
        }
        let health = Arc::clone(&health);
        let stop = stop.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let health = Arc::clone(&health);
                async move { Ok::<_, Infallible>(answer(&request, &*health).await) }
            });
            let connection = http1::Builder::new()
                .keep_alive(false)
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                served = connection => {
                    if let Err(error) = served {
                        debug!(%error, "probe server: a connection failed");
                    }
                }
                () = stop.cancelled() => {}
            }
        });
    }
    connections.shutdown().await;
}

/// The response to one request. hyper leaves the body out of the answer
/// to a `HEAD`.
async fn answer<H: Health>(request: &Request<Incoming>, health: &H) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET or HEAD\n".to_owned(),
        );
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match request.uri().path() {
        "/readyz" => match health.assigned_partitions().await {
            0 => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "no partition assigned\n".to_owned(),
            ),
            n => {
                let mut body = format!("{n} partitions assigned\n");
                for line in health.partition_details().await {
                    let _ = writeln!(body, "{}", line.replace(['\r', '\n'], " "));
                }
                text(StatusCode::OK, body)
            }
        },
        "/livez" => {
            let problems = health.liveness_problems().await;
            if problems.is_empty() {
                return text(StatusCode::OK, "live\n".to_owned());
            }
            let mut body = String::from("not live:\n");
            for problem in problems {
                let _ = writeln!(body, "{problem}");
            }
            text(StatusCode::SERVICE_UNAVAILABLE, body)
        }
        "/metrics" => match health.metrics().await {
            Some(Exposition::Text(body)) => {
                let mut response = text(StatusCode::OK, body);
                response
                    .headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
                response
            }
            Some(Exposition::Unavailable(why)) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("metrics unavailable: {why}\n"),
            ),
            None => text(StatusCode::NOT_FOUND, "not found\n".to_owned()),
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n".to_owned()),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}
