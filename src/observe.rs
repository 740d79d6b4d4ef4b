//! The client's metrics: instruments made from the process's meter
//! provider, whose readers (the probe server's `/metrics`, and OTLP when
//! an endpoint is set) all read the same instruments.

use crate::config::ConfigError;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use prosody_core::hash::FastMap;
use prosody_core::metrics::Metrics;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

/// The instruments made, by broker kind (Kafka or not) and group.
type Made = FastMap<(bool, Arc<str>), Metrics>;

/// The instruments of the clients of consumer group `group`; none when
/// `enabled` is false.
///
/// Invariant: one set per process for each broker kind and group, so the
/// clients of a group share their series, and building clients does not
/// add instruments or callbacks without bound. The process's meter
/// provider is made (on the first call) off the async runtime: it reads
/// certificate files and starts the export's threads.
pub(crate) async fn metrics(
    enabled: bool,
    kafka: bool,
    group: &Arc<str>,
) -> Result<Metrics, ConfigError> {
    static MADE: OnceLock<Mutex<Made>> = OnceLock::new();
    if !enabled {
        return Ok(Metrics::off());
    }
    let invalid = |reason: String| ConfigError::Invalid {
        option: "metrics_enabled",
        reason,
    };
    let provider = tokio::task::spawn_blocking(crate::otel::meter_provider)
        .await
        .map_err(|e| invalid(e.to_string()))?
        .map_err(|e| invalid(e.to_string()))?;
    let system = if kafka { "kafka" } else { "memory" };
    let mut made = MADE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    Ok(made
        .entry((kafka, Arc::clone(group)))
        .or_insert_with(|| Metrics::new(&provider.meter("prosody"), system, Arc::clone(group)))
        .clone())
}

/// What one client counts outside its partitions: telemetry events
/// dropped on a full queue, answers to its requests dropped by its inbox
/// (late, or for a request it forgot), failure reports dropped because the
/// error-report hook fell behind, the keyed-state cache's and the
/// published-state readers' cache's hits and misses, and what its peer
/// endpoint refused, by reason; one count per series of [`COUNTERS`], in
/// their order.
pub(crate) trait Counts: Send + Sync {
    fn counts(&self) -> [u64; SERIES];
}

/// A counter of [`Counts`]: its name, unit and description, and the
/// `prosody.reason` of each of its series (none: one series, no reason).
struct Counter {
    name: &'static str,
    unit: &'static str,
    description: &'static str,
    reasons: &'static [&'static str],
}

/// The series of all counters.
pub(crate) const SERIES: usize = 11;

/// The counters, their series in the order of [`Counts::counts`].
const COUNTERS: [Counter; 8] = [
    Counter {
        name: "prosody.telemetry.dropped",
        unit: "{event}",
        description: "Lifecycle events dropped because the telemetry queue was full.",
        reasons: &[],
    },
    Counter {
        name: "prosody.request.answers.dropped",
        unit: "{answer}",
        description: "Answers to requests dropped: late, or for a request no longer waited for.",
        reasons: &[],
    },
    Counter {
        name: "prosody.error_reports.dropped",
        unit: "{report}",
        description: "Failure reports dropped because the error-report hook fell behind.",
        reasons: &[],
    },
    Counter {
        name: "prosody.state.cache.hits",
        unit: "{read}",
        description: "Keyed-state cell reads the owners' cache answered.",
        reasons: &[],
    },
    Counter {
        name: "prosody.state.cache.misses",
        unit: "{read}",
        description: "Keyed-state cell reads that went to the store.",
        reasons: &[],
    },
    Counter {
        name: "prosody.published.cache.hits",
        unit: "{read}",
        description: "Published-state reads the readers' cache answered.",
        reasons: &[],
    },
    Counter {
        name: "prosody.published.cache.misses",
        unit: "{read}",
        description: "Published-state reads through the readers' cache that went to the store.",
        reasons: &[],
    },
    Counter {
        name: "prosody.peer.refused",
        unit: "{refusal}",
        description: "Connections and requests the peer endpoint refused, by reason.",
        reasons: &["connections", "body_too_large", "malformed", "slow"],
    },
];

/// Registers [`COUNTERS`] on `meter`, each series summing the counts of
/// the live clients of `watched` per group.
fn register(meter: &Meter, watched: &Arc<Watched>) {
    let mut first = 0;
    for counter in &COUNTERS {
        let reasons: Vec<Option<&'static str>> = if counter.reasons.is_empty() {
            vec![None]
        } else {
            counter.reasons.iter().copied().map(Some).collect()
        };
        let series = first..first + reasons.len();
        first = series.end;
        let watched = Arc::clone(watched);
        meter
            .u64_observable_counter(counter.name)
            .with_unit(counter.unit)
            .with_description(counter.description)
            .with_callback(move |observer| {
                let mut clients = watched.lock().unwrap_or_else(PoisonError::into_inner);
                clients.retain(|(_, client)| client.strong_count() > 0);
                let mut sums: FastMap<Arc<str>, Vec<u64>> = FastMap::default();
                for (group, client) in clients.iter() {
                    if let Some(client) = client.upgrade() {
                        let counts = client.counts();
                        let sum = sums
                            .entry(Arc::clone(group))
                            .or_insert_with(|| vec![0; reasons.len()]);
                        for (total, index) in sum.iter_mut().zip(series.clone()) {
                            *total += counts.get(index).copied().unwrap_or(0);
                        }
                    }
                }
                for (group, sum) in sums {
                    for (count, reason) in sum.into_iter().zip(&reasons) {
                        let mut attributes = vec![KeyValue::new(
                            "messaging.consumer.group.name",
                            Arc::clone(&group),
                        )];
                        if let Some(reason) = reason {
                            attributes.push(KeyValue::new("prosody.reason", *reason));
                        }
                        observer.observe(count, &attributes);
                    }
                }
            })
            .build();
    }
}

/// The clients whose counts the counters report, each with its group.
type Watched = Mutex<Vec<(Arc<str>, Weak<dyn Counts>)>>;

/// Reports `client`'s counts under consumer group `group`, summed with
/// the other live clients of the group, while it lives (nothing when
/// `metrics` are off).
///
/// Invariant: the counters are registered once per process and hold the
/// clients weakly; a client gone is forgotten at the next registration or
/// collection (its counts leave the sum, which a reader sees as a reset).
pub(crate) fn watch(group: &Arc<str>, metrics: &Metrics, client: Weak<dyn Counts>) {
    static WATCHED: OnceLock<Arc<Watched>> = OnceLock::new();
    if !metrics.enabled() {
        return;
    }
    let Ok(provider) = crate::otel::meter_provider() else {
        return;
    };
    let watched = WATCHED.get_or_init(|| {
        let watched: Arc<Watched> = Arc::default();
        register(&provider.meter("prosody"), &watched);
        watched
    });
    let mut clients = watched.lock().unwrap_or_else(PoisonError::into_inner);
    clients.retain(|(_, client)| client.strong_count() > 0);
    clients.push((Arc::clone(group), client));
}

#[cfg(test)]
mod tests;
