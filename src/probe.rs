//! The client's probe server: started by the first `subscribe`, stopped by
//! `shutdown`. Between an `unsubscribe` and the next `subscribe` it keeps
//! answering, `/readyz` with `503`.

use crate::client::{Inner, ProsodyClient};
use prosody_core::Codec;
use prosody_probe::{Health, ProbeServer};
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;
use tokio::runtime::Handle;
use tracing::error;

/// How long the client's runtime has to answer a probe before the probe
/// fails: a runtime that cannot run a small task is not live.
const ANSWER: Duration = Duration::from_secs(5);

/// The probe server's slot.
#[derive(Debug, Default)]
enum Slot {
    #[default]
    Idle,
    Running(ProbeServer),
    /// Stopped by shutdown: never starts again.
    Closed,
}

/// The running probe server, if any.
///
/// Invariant: once stopped by shutdown, no server starts again.
#[derive(Debug, Default)]
pub(crate) struct Probe(Mutex<Slot>);

impl Probe {
    fn server(&self) -> MutexGuard<'_, Slot> {
        // Nothing panics while holding it.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the server listens, once started.
    pub(crate) fn address(&self) -> Option<SocketAddr> {
        match &*self.server() {
            Slot::Running(server) => Some(server.local_addr()),
            Slot::Idle | Slot::Closed => None,
        }
    }

    /// Starts the server on `port` unless it runs. A port that cannot be
    /// bound is logged, not fatal: the client consumes without probes.
    pub(crate) fn start<C: Codec>(&self, port: u16, inner: Weak<Inner<C>>, runtime: Handle) {
        let mut slot = self.server();
        if !matches!(*slot, Slot::Idle) {
            return;
        }
        match ProbeServer::start(port, ClientHealth { inner, runtime }) {
            Ok(server) => *slot = Slot::Running(server),
            Err(e) => error!(port, error = %e, "the probe server could not start; no probes"),
        }
    }

    /// Stops the server, if it runs, for good.
    pub(crate) async fn stop(&self) {
        let slot = std::mem::replace(&mut *self.server(), Slot::Closed);
        if let Slot::Running(server) = slot {
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
    /// runtime is gone, or when the runtime does not answer in time.
    async fn ask<T, F>(&self, ask: F) -> Option<T>
    where
        T: Send + 'static,
        F: FnOnce(ProsodyClient<C>) -> T + Send + 'static,
    {
        let inner = self.inner.clone();
        let answer = self
            .runtime
            .spawn(async move { inner.upgrade().map(|inner| ask(ProsodyClient { inner })) });
        let abort = answer.abort_handle();
        let answered = tokio::time::timeout(ANSWER, answer).await;
        if answered.is_err() {
            abort.abort();
        }
        answered.ok()?.ok().flatten()
    }
}

impl<C: Codec> Health for ClientHealth<C> {
    async fn assigned_partitions(&self) -> usize {
        self.ask(|client| client.assigned_partition_count())
            .await
            .unwrap_or(0)
    }

    async fn liveness_problems(&self) -> Vec<String> {
        self.ask(|client| client.liveness_problems())
            .await
            .unwrap_or_else(|| {
                vec![format!(
                    "the client's runtime did not answer within {}",
                    humantime::format_duration(ANSWER)
                )]
            })
    }
}
