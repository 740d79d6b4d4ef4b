//! The client's probe server: started by the first `subscribe`, stopped by
//! `shutdown`. Between an `unsubscribe` and the next `subscribe` it keeps
//! answering, `/readyz` with `503`.

use crate::client::{Inner, ProsodyClient};
use prosody_core::Codec;
use prosody_probe::{Health, ProbeServer};
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, PoisonError, Weak};
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
    pub(crate) async fn start<C: Codec>(&self, port: u16, inner: Weak<Inner<C>>) {
        if self.server().is_some() {
            return;
        }
        match ProbeServer::start(port, ClientHealth(inner)).await {
            Ok(server) => {
                let mut slot = self.server();
                if slot.is_none() {
                    *slot = Some(server);
                }
            }
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

/// The client as the probes see it; weak, so the server does not keep the
/// client alive.
struct ClientHealth<C>(Weak<Inner<C>>);

impl<C: Codec> Health for ClientHealth<C> {
    fn assigned_partitions(&self) -> usize {
        self.0.upgrade().map_or(0, |inner| {
            ProsodyClient { inner }.assigned_partition_count()
        })
    }

    fn stalled_partitions(&self) -> Vec<String> {
        self.0.upgrade().map_or_else(Vec::new, |inner| {
            ProsodyClient { inner }
                .stalled_partitions()
                .iter()
                .map(ToString::to_string)
                .collect()
        })
    }
}
