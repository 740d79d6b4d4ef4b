//! Health probes for an orchestrator: an HTTP server answering
//!
//! - `GET /readyz`: `200` when the client holds at least one partition,
//!   else `503`;
//! - `GET /livez`: `200` unless a partition with work pending has made no
//!   progress for the stall threshold, else `503` with the stalled
//!   partitions in the body, one per line.
//!
//! Anything else is `404`. The server reads its answers from a [`Health`]
//! at each request, so the endpoints and the client's own methods agree.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// What the probes report; read at each request.
pub trait Health: Send + Sync + 'static {
    /// How many partitions the client holds now.
    fn assigned_partitions(&self) -> usize;

    /// The partitions with work pending and no progress for the stall
    /// threshold, named for the response body.
    fn stalled_partitions(&self) -> Vec<String>;
}

/// A running probe server.
///
/// Invariant: after [`ProbeServer::stop`] returns, the port is closed and
/// no request is served; dropping the server stops it too (without
/// waiting).
#[derive(Debug)]
pub struct ProbeServer {
    address: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl ProbeServer {
    /// Listens on `port` of every interface (0 picks a free port) and
    /// serves `health`.
    ///
    /// # Errors
    ///
    /// The port cannot be bound (in use, or not permitted).
    pub async fn start(port: u16, health: impl Health) -> io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))).await?;
        let address = listener.local_addr()?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(serve(listener, Arc::new(health), stop.clone()));
        debug!(%address, "probe server listening");
        Ok(Self {
            address,
            stop,
            task,
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
        let _ = (&mut self.task).await;
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
                warn!(%error, "probe server: accepting a connection failed");
                continue;
            }
        };
        let health = Arc::clone(&health);
        let stop = stop.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let health = Arc::clone(&health);
                async move { Ok::<_, Infallible>(answer(&request, &*health)) }
            });
            let connection = http1::Builder::new()
                .keep_alive(false)
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
        while connections.try_join_next().is_some() {}
    }
    connections.shutdown().await;
}

/// The response to one request.
fn answer<H: Health + ?Sized>(request: &Request<Incoming>, health: &H) -> Response<Full<Bytes>> {
    if request.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n".to_owned());
    }
    match request.uri().path() {
        "/readyz" => match health.assigned_partitions() {
            0 => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "no partition assigned\n".to_owned(),
            ),
            n => text(StatusCode::OK, format!("{n} partitions assigned\n")),
        },
        "/livez" => {
            let stalled = health.stalled_partitions();
            if stalled.is_empty() {
                return text(StatusCode::OK, "live\n".to_owned());
            }
            let mut body = String::from("stalled partitions:\n");
            for partition in stalled {
                let _ = writeln!(body, "{partition}");
            }
            text(StatusCode::SERVICE_UNAVAILABLE, body)
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n".to_owned()),
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}
