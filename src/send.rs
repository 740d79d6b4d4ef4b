//! Producing: encodes payloads, writes the client's headers, sends and
//! reports each send.

use crate::backend::BackendProducer;
use crate::error::ClientError;
use crate::gate::Gate;
use prosody_core::broker::{BrokerError, Delivery, OutgoingRecord, Producer};
use prosody_core::event::Topic;
use prosody_core::metrics::Metrics;
use prosody_core::peer::Asked;
use prosody_core::telemetry::{Lifecycle, ProducerSink, TelemetryEvent, TelemetrySink as _};
use prosody_core::{Codec, Demand, Headers, Key, SOURCE_SYSTEM_HEADER, clock};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The client's producing side: its codec, its producer and what each
/// record it sends carries.
///
/// Invariant: every record sent carries the `source-system` header and the
/// sending span's trace context; every send is waited for until the broker
/// has it (or `timeout`) and reported once, in the metrics and, with a
/// telemetry sink, as a lifecycle event; nothing is sent once the client's
/// gate is closed.
pub(crate) struct Sender<C> {
    gate: Arc<Gate>,
    codec: C,
    producer: BackendProducer,
    source_system: Arc<str>,
    timeout: Duration,
    metrics: Metrics,
    telemetry: Option<ProducerSink>,
}

impl<C> Sender<C> {
    pub(crate) fn new(
        gate: Arc<Gate>,
        codec: C,
        producer: BackendProducer,
        source_system: Arc<str>,
        timeout: Duration,
        metrics: Metrics,
        telemetry: Option<ProducerSink>,
    ) -> Self {
        Self {
            gate,
            codec,
            producer,
            source_system,
            timeout,
            metrics,
            telemetry,
        }
    }

    /// The identifier written to the `source-system` header.
    pub(crate) fn source_system(&self) -> &str {
        &self.source_system
    }

    /// The client's instruments.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

impl<C: Codec> Sender<C> {
    /// `Ok` until the client's shutdown starts.
    pub(crate) fn check_open(&self) -> Result<(), ClientError> {
        self.gate.check()
    }

    /// The record of `payload` under `key` for `topic`, without headers.
    pub(crate) fn encode(
        &self,
        topic: &str,
        key: &Key,
        payload: &C::Value,
    ) -> Result<OutgoingRecord, ClientError> {
        let bytes = self
            .codec
            .encode(payload)
            .map_err(|source| ClientError::Encode {
                topic: topic.to_owned(),
                source,
            })?;
        Ok(OutgoingRecord::new(topic, key.as_bytes().to_vec(), bytes))
    }

    /// Sends a keyed record and waits until the broker has it.
    pub(crate) async fn send(
        &self,
        topic: &str,
        key: Key,
        payload: &C::Value,
    ) -> Result<(), ClientError> {
        self.check_open()?;
        let record = self.encode(topic, &key, payload)?;
        self.produce(record, None).await
    }

    /// Sends an excise record (a tombstone) for `key` and waits until the
    /// broker has it.
    pub(crate) async fn excise(&self, topic: &str, key: Key) -> Result<(), ClientError> {
        self.check_open()?;
        self.produce(
            OutgoingRecord::tombstone(topic, key.as_bytes().to_vec()),
            None,
        )
        .await
    }

    /// Sends `record` with the client's headers (and `asked`'s, for a
    /// request) and waits until the broker has it.
    pub(crate) async fn produce(
        &self,
        mut record: OutgoingRecord,
        asked: Option<&Asked>,
    ) -> Result<(), ClientError> {
        let mut headers = Headers::new();
        headers.push(
            SOURCE_SYSTEM_HEADER,
            self.source_system().as_bytes().to_vec(),
        );
        if let Some(asked) = asked {
            asked.write(&mut headers);
        }
        // The sending span's trace context, for the consumer's span.
        prosody_core::trace::inject(&mut headers);
        record.headers = headers;
        let sent = Sent::of(&record);
        let delivered = self.producer.send(record, self.timeout).await;
        sent.report(&delivered, &self.metrics, self.telemetry.as_ref());
        delivered?;
        Ok(())
    }
}

/// A send under way: what its end reports, in the metrics
/// (`messaging.client.sent.messages`, `messaging.client.operation.duration`)
/// and as a `sent` or `send_failed` event on the telemetry topic.
struct Sent {
    topic: Topic,
    key: Key,
    kind: &'static str,
    started: Instant,
}

impl Sent {
    /// Starts timing the send of `record`.
    fn of(record: &OutgoingRecord) -> Self {
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
    fn report(
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
