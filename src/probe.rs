//! The client's probe server: started by the first `subscribe`, stopped by
//! `shutdown`. Between an `unsubscribe` and the next `subscribe` it keeps
//! answering, `/readyz` with `503`. With the `otel` feature, `/metrics`
//! serves the process's scrape reader (`prosody_otel::scrape`) as
//! Prometheus text, or `503` while no meter provider reads through it
//! (metrics off, or shut down); without it `/metrics` is not served.

use prosody_core::broker::TopicPartition;
use prosody_core::store::DeferCounts;
#[cfg(feature = "otel")]
use prosody_otel::scrape::{self, ScrapeReader};
use prosody_probe::{Exposition, Health, ProbeServer};
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::time::Instant;
use tracing::{error, warn};

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

/// What the probes ask of the client: its consumer's partitions and
/// liveness.
pub(crate) trait Status: Send + Sync + 'static {
    /// How many partitions the client consumes now.
    fn assigned_partition_count(&self) -> usize;

    /// Each partition consumed, in order, with its deferred keys and
    /// records.
    fn deferred_counts(&self) -> Vec<(TopicPartition, DeferCounts)>;

    /// What keeps the consumer from being live, one line each; empty when
    /// live.
    fn liveness_problems(&self) -> Vec<String>;
}

/// The client's probe server, if any: where it would listen, what it
/// reports, and whether it runs.
///
/// Invariant: it holds the client's [`Status`] weakly, so a running server
/// keeps no client alive; once stopped by shutdown, no server starts
/// again.
#[derive(Debug)]
pub(crate) struct Probe {
    server: Mutex<Slot>,
    /// `None` when disabled.
    port: Option<u16>,
    status: Weak<dyn Status>,
}

impl Probe {
    /// A probe server not yet started, to listen on `port` (none: never)
    /// and report `status`.
    pub(crate) fn new(port: Option<u16>, status: Weak<dyn Status>) -> Self {
        Self {
            server: Mutex::new(Slot::Idle),
            port,
            status,
        }
    }

    fn server(&self) -> MutexGuard<'_, Slot> {
        // Nothing panics while holding it.
        self.server.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the server listens, once started.
    pub(crate) fn address(&self) -> Option<SocketAddr> {
        match &*self.server() {
            Slot::Running(server) => Some(server.local_addr()),
            Slot::Idle | Slot::Closed => None,
        }
    }

    /// Starts the server on its port, on the current runtime, unless it
    /// runs (or is disabled, or there is no runtime). A port that cannot be
    /// bound is logged, not fatal: the client consumes without probes.
    pub(crate) fn start(&self) {
        let (Some(port), Ok(runtime)) = (self.port, Handle::try_current()) else {
            return;
        };
        let mut slot = self.server();
        if !matches!(*slot, Slot::Idle) {
            return;
        }
        let health = ClientHealth {
            status: self.status.clone(),
            runtime,
            #[cfg(feature = "otel")]
            metrics: scrape::reader(),
        };
        match ProbeServer::start(port, health) {
            Ok(server) => *slot = Slot::Running(server),
            Err(e) => error!(port, error = %e, "the probe server could not start; no probes"),
        }
    }

    /// Stops the server, if it runs, for good; waits for it until
    /// `deadline` at most (past it the server ends in the background).
    pub(crate) async fn stop(&self, deadline: Instant) {
        let slot = std::mem::replace(&mut *self.server(), Slot::Closed);
        if let Slot::Running(server) = slot
            && tokio::time::timeout_at(deadline, server.stop())
                .await
                .is_err()
        {
            warn!("the probe server did not stop by shutdown_timeout; it ends in the background");
        }
    }
}

/// The client as the probes see it: weak, so the server does not keep the
/// client alive, and asked on the client's runtime, so stalls are measured
/// by the client's clock. The metrics are the process's, read on the probe
/// server's thread.
struct ClientHealth {
    status: Weak<dyn Status>,
    runtime: Handle,
    /// The process's scrape reader (`prosody-otel`'s).
    #[cfg(feature = "otel")]
    metrics: ScrapeReader,
}

impl ClientHealth {
    /// `ask` of the client on its runtime; `None` once the client or its
    /// runtime is gone, or when the runtime does not answer in time.
    async fn ask<T, F>(&self, ask: F) -> Option<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Status) -> T + Send + 'static,
    {
        let status = self.status.clone();
        let answer = self
            .runtime
            .spawn(async move { status.upgrade().map(|status| ask(&*status)) });
        let abort = answer.abort_handle();
        let answered = tokio::time::timeout(ANSWER, answer).await;
        if answered.is_err() {
            abort.abort();
        }
        answered.ok()?.ok().flatten()
    }
}

impl Health for ClientHealth {
    async fn assigned_partitions(&self) -> usize {
        self.ask(Status::assigned_partition_count)
            .await
            .unwrap_or(0)
    }

    /// `{partition}: {keys} deferred keys, {records} deferred records`,
    /// in order ([`Status::deferred_counts`]).
    async fn partition_details(&self) -> Vec<String> {
        self.ask(|status| {
            status
                .deferred_counts()
                .iter()
                .map(|(partition, counts)| {
                    format!(
                        "{partition}: {} deferred keys, {} deferred records",
                        counts.keys, counts.records
                    )
                })
                .collect()
        })
        .await
        .unwrap_or_default()
    }

    async fn liveness_problems(&self) -> Vec<String> {
        self.ask(Status::liveness_problems)
            .await
            .unwrap_or_else(|| {
                vec![format!(
                    "the client's runtime did not answer within {}",
                    humantime::format_duration(ANSWER)
                )]
            })
    }

    /// Collected and encoded right here, on the probe server's thread, not
    /// on the client's runtime: the reader is the process's and needs
    /// nothing of the client, so a scrape takes no worker from the
    /// handlers, and a busy runtime does not delay a scrape. (Collecting
    /// takes each instrument's lock only to copy its values out.)
    #[cfg(feature = "otel")]
    async fn metrics(&self) -> Option<Exposition> {
        Some(match self.metrics.collect_now() {
            Ok(metrics) => Exposition::Text(scrape::encode(&metrics)),
            Err(error) => Exposition::Unavailable(format!(
                "no meter provider reads them in this process ({error})"
            )),
        })
    }

    /// Without the `otel` feature the process has no scrape reader:
    /// `/metrics` is not served (404).
    #[cfg(not(feature = "otel"))]
    async fn metrics(&self) -> Option<Exposition> {
        None
    }
}

#[cfg(all(test, feature = "otel"))]
mod tests {
    #![allow(
        clippy::expect_used,
        clippy::unwrap_used,
        clippy::panic,
        reason = "test code fails loudly"
    )]

    use super::*;
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::SdkMeterProvider;

    /// A client that is gone before it is asked.
    struct Gone;

    impl Status for Gone {
        fn assigned_partition_count(&self) -> usize {
            0
        }

        fn deferred_counts(&self) -> Vec<(TopicPartition, DeferCounts)> {
            Vec::new()
        }

        fn liveness_problems(&self) -> Vec<String> {
            Vec::new()
        }
    }

    fn health(metrics: ScrapeReader) -> ClientHealth {
        ClientHealth {
            status: Weak::<Gone>::new(),
            runtime: Handle::current(),
            metrics,
        }
    }

    /// Unavailable before a provider reads through the reader and after it
    /// shut down; the encoded metrics between, even with the client gone.
    #[tokio::test]
    async fn metrics_follow_the_meter_provider() {
        let reader = ScrapeReader::new();
        let health = health(reader.clone());
        let Some(Exposition::Unavailable(why)) = health.metrics().await else {
            panic!("metrics before a provider reads them");
        };
        assert!(why.contains("not registered"), "{why}");

        let provider = SdkMeterProvider::builder().with_reader(reader).build();
        provider
            .meter("test")
            .u64_counter("jobs")
            .build()
            .add(2, &[]);
        let Some(Exposition::Text(text)) = health.metrics().await else {
            panic!("no metrics while a provider reads them");
        };
        let exposition = openmetrics_parser::prometheus::parse_prometheus(&text)
            .unwrap_or_else(|e| panic!("{e:?} in\n{text}"));
        assert!(exposition.families.contains_key("jobs_total"), "{text}");
        assert!(exposition.families.contains_key("target_info"), "{text}");

        provider.shutdown().unwrap();
        assert!(
            matches!(health.metrics().await, Some(Exposition::Unavailable(_))),
            "metrics after the provider shut down"
        );
    }
}
