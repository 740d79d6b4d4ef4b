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
use prosody_core::metrics::Metrics;
use prosody_core::report::ReportSink;
use prosody_core::telemetry::{Lifecycle, ProducerSink, TelemetryEvent, TelemetrySink as _};
use prosody_core::{Demand, Key, clock};
use prosody_state::CacheLookups;
use std::sync::Arc;
use tokio::time::Instant;

/// The instruments of a client of consumer group `group`; none when
/// `enabled` is false.
pub(crate) fn metrics(enabled: bool, kafka: bool, group: &str) -> Result<Metrics, ConfigError> {
    if !enabled {
        return Ok(Metrics::off());
    }
    let provider = crate::otel::meter_provider().map_err(|e| ConfigError::Invalid {
        option: "metrics_enabled",
        reason: e.to_string(),
    })?;
    let system = if kafka { "kafka" } else { "memory" };
    Ok(Metrics::new(&provider.meter("prosody"), system, group))
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
            key: self.key,
            attempt: 1,
            demand: Demand::Normal,
            at: clock::now(),
        });
    }
}

/// A counter a client reports: its name, unit, description, and how to
/// read it from the client.
type Count<C> = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Inner<C>) -> u64,
);

/// What a client counts outside its partitions, as counters read at each
/// collection: telemetry events dropped on a full queue, answers to its
/// requests dropped by its inbox (late, or for a request it forgot), and
/// failure reports dropped because the error-report hook fell behind,
/// and the keyed-state cache's hits and misses.
/// The callbacks hold the client weakly: once it is gone they report
/// nothing.
pub(crate) fn watch<C: Codec>(inner: &Arc<Inner<C>>) {
    if !inner.settings.runtime.metrics.enabled() {
        return;
    }
    let Ok(provider) = crate::otel::meter_provider() else {
        return;
    };
    let meter = provider.meter("prosody");
    let group: Arc<str> = Arc::clone(&inner.settings.runtime.group_id);
    let counters: [Count<C>; 5] = [
        (
            "prosody.telemetry.dropped",
            "{event}",
            "Lifecycle events dropped because the telemetry queue was full.",
            |inner| {
                inner
                    .layers
                    .telemetry_sink()
                    .map_or(0, ProducerSink::dropped)
            },
        ),
        (
            "prosody.request.answers.dropped",
            "{answer}",
            "Answers to this client's requests dropped: late, or for a request it no longer waits for.",
            |inner| inner.requests.dropped(),
        ),
        (
            "prosody.error_reports.dropped",
            "{report}",
            "Failure reports dropped because the error-report hook fell behind.",
            |inner| inner.layers.report_sink().map_or(0, ReportSink::dropped),
        ),
        (
            "prosody.state.cache.hits",
            "{read}",
            "Keyed-state cell reads the owners' cache answered.",
            |inner| inner.lookups.as_ref().map_or(0, CacheLookups::hits),
        ),
        (
            "prosody.state.cache.misses",
            "{read}",
            "Keyed-state cell reads that went to the store.",
            |inner| inner.lookups.as_ref().map_or(0, CacheLookups::misses),
        ),
    ];
    for (name, unit, description, read) in counters {
        let client = Arc::downgrade(inner);
        let attributes = [KeyValue::new(
            "messaging.consumer.group.name",
            Arc::clone(&group),
        )];
        meter
            .u64_observable_counter(name)
            .with_unit(unit)
            .with_description(description)
            .with_callback(move |observer| {
                if let Some(inner) = client.upgrade() {
                    observer.observe(read(&inner), &attributes);
                }
            })
            .build();
    }
}
