//! The client's probe server: started by the first `subscribe`, stopped by
//! `shutdown`. Between an `unsubscribe` and the next `subscribe` it keeps
//! answering, `/readyz` with `503`.

use crate::client::{Inner, ProsodyClient};
use prosody_core::Codec;
use prosody_probe::{Health, ProbeServer};
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, PoisonError, Weak};
use tokio::runtime::Handle;
use tracing::error;

/// The running probe server, if any.
#[derive(Debug, Default)]
pub(crate) struct Probe(Mutex<Option<ProbeServer>>);

impl Probe {
    fn server(&self) -> MutexGuard<'_, Option<ProbeServer>> {
        // Nothing panics while holding it.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the server listens, once started.
    pub(crate) fn address(&self) -> Option<SocketAddr> {
        self.server().as_ref().map(ProbeServer::local_addr)
    }

    /// Starts the server on `port` unless it runs. A port that cannot be
    /// bound is logged, not fatal: the client consumes without probes.
    pub(crate) fn start<C: Codec>(&self, port: u16, inner: Weak<Inner<C>>, runtime: Handle) {
        let mut slot = self.server();
        if slot.is_some() {
            return;
        }
        match ProbeServer::start(port, ClientHealth { inner, runtime }) {
            Ok(server) => *slot = Some(server),
            Err(e) => error!(port, error = %e, "the probe server could not start; no probes"),
        }
    }

    /// Stops the server, if it runs.
    pub(crate) async fn stop(&self) {
        let server = self.server().take();
        if let Some(server) = server {
            server.stop().await;
        }
    }
}

/// The client as the probes see it: weak, so the server does not keep the
/// client alive, and asked on the client's runtime, so stalls are measured
/// by the client's clock.
struct ClientHealth<C> {
    inner: Weak<Inner<C>>,
    runtime: Handle,
}

impl<C: Codec> ClientHealth<C> {
    /// `ask` of the client on its runtime; `None` once the client or its
    /// runtime is gone.
    async fn ask<T, F>(&self, ask: F) -> Option<T>
    where
        T: Send + 'static,
        F: FnOnce(ProsodyClient<C>) -> T + Send + 'static,
    {
        let inner = self.inner.clone();
        let answer = self
            .runtime
            .spawn(async move { inner.upgrade().map(|inner| ask(ProsodyClient { inner })) });
        answer.await.ok().flatten()
    }
}

impl<C: Codec> Health for ClientHealth<C> {
    async fn assigned_partitions(&self) -> usize {
        self.ask(|client| client.assigned_partition_count())
            .await
            .unwrap_or(0)
    }

    async fn stalled_partitions(&self) -> Vec<String> {
        self.ask(|client| {
            client
                .stalled_partitions()
                .iter()
                .map(ToString::to_string)
                .collect()
        })
        .await
        .unwrap_or_default()
    }
}
