//! The client's metrics: instruments made from the process's meter
//! provider, whose readers (the probe server's `/metrics`, and OTLP when
//! an endpoint is set) all read the same instruments.

use crate::ConfigError;
use crate::client::Inner;
use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use prosody_core::Codec;
use prosody_core::broker::{BrokerError, Delivery, OutgoingRecord};
use prosody_core::event::Topic;
use prosody_core::hash::FastMap;
use prosody_core::metrics::Metrics;
use prosody_core::report::ReportSink;
use prosody_core::telemetry::{Lifecycle, ProducerSink, TelemetryEvent, TelemetrySink as _};
use prosody_core::{Demand, Key, clock};
use prosody_state::CacheLookups;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use tokio::time::Instant;

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

/// A send under way: what its end reports, in the metrics
/// (`messaging.client.sent.messages`, `messaging.client.operation.duration`)
/// and as a `sent` or `send_failed` event on the telemetry topic.
pub(crate) struct Sent {
    topic: Topic,
    key: Key,
    kind: &'static str,
    started: Instant,
}

impl Sent {
    /// Starts timing the send of `record`.
    pub(crate) fn of(record: &OutgoingRecord) -> Self {
        let key =
            Key::from(String::from_utf8_lossy(record.key.as_deref().unwrap_or_default()).as_ref());
        Self {
            topic: Arc::clone(&record.topic),
            key,
            kind: if record.payload.is_some() {
                "message"
            } else {
                "excise"
            },
            started: Instant::now(),
        }
    }

    /// The send ended with `delivered`.
    pub(crate) fn report(
        self,
        delivered: &Result<Delivery, BrokerError>,
        metrics: &Metrics,
        telemetry: Option<&ProducerSink>,
    ) {
        let elapsed = self.started.elapsed();
        metrics.sent(
            &self.topic,
            elapsed,
            delivered.as_ref().err().map(BrokerError::kind),
        );
        let Some(sink) = telemetry.filter(|sink| sink.enabled()) else {
            return;
        };
        let (lifecycle, partition, offset) = match delivered {
            Ok(delivery) => (
                Lifecycle::Sent { elapsed },
                delivery.partition,
                Some(delivery.offset),
            ),
            Err(_) => (Lifecycle::SendFailed { elapsed }, -1, None),
        };
        sink.emit(TelemetryEvent {
            lifecycle,
            kind: self.kind,
            topic: self.topic,
            partition,
            offset,
            fire_time: None,
            key: self.key,
            attempt: 1,
            demand: Demand::Normal,
            at: clock::now(),
        });
    }
}

/// What one client counts outside its partitions: telemetry events
/// dropped on a full queue, answers to its requests dropped by its inbox
/// (late, or for a request it forgot), failure reports dropped because the
/// error-report hook fell behind, and the keyed-state cache's hits and
/// misses.
trait Counts: Send + Sync {
    fn counts(&self) -> [u64; 5];
}

impl<C: Codec> Counts for Inner<C> {
    fn counts(&self) -> [u64; 5] {
        [
            self.layers
                .telemetry_sink()
                .map_or(0, ProducerSink::dropped),
            self.requests.dropped(),
            self.layers.report_sink().map_or(0, ReportSink::dropped),
            self.lookups.as_ref().map_or(0, CacheLookups::hits),
            self.lookups.as_ref().map_or(0, CacheLookups::misses),
        ]
    }
}

/// The counters, in the order of [`Counts::counts`].
const COUNTERS: [(&str, &str, &str); 5] = [
    (
        "prosody.telemetry.dropped",
        "{event}",
        "Lifecycle events dropped because the telemetry queue was full.",
    ),
    (
        "prosody.request.answers.dropped",
        "{answer}",
        "Answers to requests dropped: late, or for a request no longer waited for.",
    ),
    (
        "prosody.error_reports.dropped",
        "{report}",
        "Failure reports dropped because the error-report hook fell behind.",
    ),
    (
        "prosody.state.cache.hits",
        "{read}",
        "Keyed-state cell reads the owners' cache answered.",
    ),
    (
        "prosody.state.cache.misses",
        "{read}",
        "Keyed-state cell reads that went to the store.",
    ),
];

/// The clients whose counts the counters report, each with its group.
type Watched = Mutex<Vec<(Arc<str>, Weak<dyn Counts>)>>;

/// Reports `inner`'s counts, summed with the other live clients of its
/// group, while it lives.
///
/// Invariant: the counters are registered once per process and hold the
/// clients weakly; a client gone is forgotten at the next registration or
/// collection (its counts leave the sum, which a reader sees as a reset).
pub(crate) fn watch<C: Codec>(inner: &Arc<Inner<C>>) {
    static WATCHED: OnceLock<Arc<Watched>> = OnceLock::new();
    if !inner.settings.runtime.metrics.enabled() {
        return;
    }
    let Ok(provider) = crate::otel::meter_provider() else {
        return;
    };
    let watched = WATCHED.get_or_init(|| {
        let watched: Arc<Watched> = Arc::default();
        let meter = provider.meter("prosody");
        for (index, (name, unit, description)) in COUNTERS.into_iter().enumerate() {
            let watched = Arc::clone(&watched);
            meter
                .u64_observable_counter(name)
                .with_unit(unit)
                .with_description(description)
                .with_callback(move |observer| {
                    let mut clients = watched.lock().unwrap_or_else(PoisonError::into_inner);
                    clients.retain(|(_, client)| client.strong_count() > 0);
                    let mut sums: FastMap<Arc<str>, u64> = FastMap::default();
                    for (group, client) in clients.iter() {
                        if let Some(client) = client.upgrade() {
                            let count = client.counts().get(index).copied().unwrap_or(0);
                            *sums.entry(Arc::clone(group)).or_default() += count;
                        }
                    }
                    for (group, sum) in sums {
                        let attributes = [KeyValue::new("messaging.consumer.group.name", group)];
                        observer.observe(sum, &attributes);
                    }
                })
                .build();
        }
        watched
    });
    let client: Arc<dyn Counts> = inner.clone();
    let mut clients = watched.lock().unwrap_or_else(PoisonError::into_inner);
    clients.retain(|(_, client)| client.strong_count() > 0);
    clients.push((
        Arc::clone(&inner.settings.runtime.group_id),
        Arc::downgrade(&client),
    ));
}
