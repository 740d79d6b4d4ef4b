//! The client's metrics: instruments made from the meter given to the
//! builder, else the process's: `prosody-otel`'s provider (whose readers,
//! the probe server's `/metrics` and OTLP when an endpoint is set, read
//! the same instruments) with the `otel` feature, the `opentelemetry`
//! globals without it.

use crate::config::ConfigError;
use opentelemetry::KeyValue;
use opentelemetry::metrics::Meter;
use prosody_core::hash::FastMap;
use prosody_core::metrics::Metrics;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

/// The instruments made, by broker kind (Kafka or not) and group.
type Made = FastMap<(bool, Arc<str>), Metrics>;

/// The instruments of the clients of consumer group `group` on `given`,
/// else on the process's meter; none when `enabled` is false.
///
/// Invariant: on the process's meter, one set per process for each broker
/// kind and group, so the clients of a group share their series, and
/// building clients does not add instruments or callbacks without bound;
/// on a given meter, a set of the client's own. `prosody-otel`'s provider
/// is made (on the first call) off the async runtime: it reads
/// certificate files and starts the export's threads.
pub(crate) async fn metrics(
    enabled: bool,
    kafka: bool,
    group: &Arc<str>,
    given: Option<&Meter>,
) -> Result<Metrics, ConfigError> {
    static MADE: OnceLock<Mutex<Made>> = OnceLock::new();
    if !enabled {
        return Ok(Metrics::off());
    }
    let system = if kafka { "kafka" } else { "memory" };
    if let Some(meter) = given {
        return Ok(Metrics::new(meter, system, Arc::clone(group)));
    }
    let meter = process_meter().await?;
    let mut made = MADE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    Ok(made
        .entry((kafka, Arc::clone(group)))
        .or_insert_with(|| Metrics::new(&meter, system, Arc::clone(group)))
        .clone())
}

/// The process's meter: `prosody-otel`'s provider's, made off the async
/// runtime.
#[cfg(feature = "otel")]
async fn process_meter() -> Result<Meter, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        option: "metrics_enabled",
        reason,
    };
    let provider = tokio::task::spawn_blocking(prosody_otel::meter_provider)
        .await
        .map_err(|e| invalid(e.to_string()))?
        .map_err(|e| invalid(e.to_string()))?;
    Ok(opentelemetry::metrics::MeterProvider::meter(
        &provider, "prosody",
    ))
}

/// The process's meter: the `opentelemetry` globals' (a no-op until the
/// application sets a global meter provider, which it does before
/// building its clients).
#[cfg(not(feature = "otel"))]
#[allow(clippy::unused_async, reason = "the same signature with the feature")]
async fn process_meter() -> Result<Meter, ConfigError> {
    Ok(opentelemetry::global::meter("prosody"))
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

/// Reports `client`'s counts under consumer group `group`, on `given`
/// alone, else summed with the other live clients of the group on the
/// process's meter, while it lives (nothing when `metrics` are off).
///
/// Invariant: on the process's meter the counters are registered once per
/// process and hold the clients weakly; a client gone is forgotten at the
/// next registration or collection (its counts leave the sum, which a
/// reader sees as a reset). On a given meter they are the client's own,
/// and hold it weakly too.
pub(crate) fn watch(
    group: &Arc<str>,
    metrics: &Metrics,
    client: Weak<dyn Counts>,
    given: Option<&Meter>,
) {
    static WATCHED: OnceLock<Arc<Watched>> = OnceLock::new();
    if !metrics.enabled() {
        return;
    }
    if let Some(meter) = given {
        let watched: Arc<Watched> = Arc::new(Mutex::new(vec![(Arc::clone(group), client)]));
        register(meter, &watched);
        return;
    }
    let Some(meter) = process_meter_now() else {
        return;
    };
    let watched = WATCHED.get_or_init(|| {
        let watched: Arc<Watched> = Arc::default();
        register(&meter, &watched);
        watched
    });
    let mut clients = watched.lock().unwrap_or_else(PoisonError::into_inner);
    clients.retain(|(_, client)| client.strong_count() > 0);
    clients.push((Arc::clone(group), client));
}

/// The process's meter, made already by [`metrics`].
#[cfg(feature = "otel")]
fn process_meter_now() -> Option<Meter> {
    prosody_otel::meter_provider()
        .ok()
        .map(|provider| opentelemetry::metrics::MeterProvider::meter(&provider, "prosody"))
}

/// The process's meter: the `opentelemetry` globals'.
#[cfg(not(feature = "otel"))]
#[allow(
    clippy::unnecessary_wraps,
    reason = "the same signature with the feature"
)]
fn process_meter_now() -> Option<Meter> {
    Some(opentelemetry::global::meter("prosody"))
}

#[cfg(test)]
mod tests;
