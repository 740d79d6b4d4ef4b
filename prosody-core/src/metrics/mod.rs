//! Metrics: the library's OpenTelemetry instruments, made once per client
//! from a [`Meter`] and recorded on the paths they measure.
//!
//! Names follow the OpenTelemetry semantic conventions for messaging where
//! they have one (`messaging.process.duration`,
//! `messaging.client.consumed.messages`, `messaging.client.sent.messages`,
//! `messaging.client.operation.duration`); the rest are `prosody.*`.
//!
//! Invariant: no attribute holds a key, an offset or an id, so the number
//! of series is bounded by topics × partitions × the small fixed sets of
//! kinds, outcomes and operations. [`Metrics::off`] records nothing and
//! costs one branch per measuring point.

mod gauges;
mod partition;
mod stores;
#[cfg(test)]
mod tests;

pub(crate) use gauges::{Held, Readings};
pub(crate) use partition::Action;
pub use partition::{Ending, PartitionMeter};
pub use stores::Metered;

use crate::event::Topic;
use crate::hash::FastMap;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

/// Bucket bounds, in seconds, of the duration histograms: the semantic
/// conventions' advice for messaging durations.
pub(crate) const DURATION_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// The library's instruments, or none.
///
/// Invariant: clones share one set of instruments, and a partition's
/// [`PartitionMeter`] is made once per client (it outlives a revocation,
/// so a partition assigned again continues its series).
#[derive(Clone, Debug, Default)]
pub struct Metrics(Option<Arc<Instruments>>);

#[derive(Debug)]
pub(crate) struct Instruments {
    /// `messaging.system`: `kafka`, or the in-memory broker's `memory`.
    system: &'static str,
    /// `messaging.consumer.group.name`.
    group: Arc<str>,
    pub(crate) process: Histogram<f64>,
    pub(crate) consumed: Counter<u64>,
    pub(crate) stage: Counter<u64>,
    pub(crate) scheduler_wait: Histogram<f64>,
    sent: Counter<u64>,
    send_duration: Histogram<f64>,
    request_duration: Histogram<f64>,
    request_outcomes: Counter<u64>,
    pub(crate) store_duration: Histogram<f64>,
    pub(crate) store_errors: Counter<u64>,
    partitions: Mutex<FastMap<(Topic, i32), PartitionMeter>>,
    /// The runtimes whose partitions the gauges report.
    watched: Arc<gauges::Watched>,
}

impl Metrics {
    /// Instruments made from `meter`, for a client of consumer group
    /// `group` on a broker whose `messaging.system` is `system`.
    #[must_use]
    pub fn new(meter: &Meter, system: &'static str, group: impl Into<Arc<str>>) -> Self {
        let duration = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build()
        };
        let watched = Arc::new(gauges::Watched::default());
        gauges::register(meter, &watched);
        Self(Some(Arc::new(Instruments {
            system,
            group: group.into(),
            process: duration(
                "messaging.process.duration",
                "How long each handler call took, by kind and outcome.",
            ),
            consumed: meter
                .u64_counter("messaging.client.consumed.messages")
                .with_unit("{message}")
                .with_description("Records received from the broker.")
                .build(),
            stage: meter
                .u64_counter("prosody.stage.events")
                .with_unit("{event}")
                .with_description(
                    "What the quality-of-service stages did: retries, deferrals, dedup hits, \
                     monopolization rejections, failure-topic sends, decode failures.",
                )
                .build(),
            scheduler_wait: duration(
                "prosody.scheduler.wait.duration",
                "How long each attempt waited for a scheduler permit.",
            ),
            sent: meter
                .u64_counter("messaging.client.sent.messages")
                .with_unit("{message}")
                .with_description("Records sent, by outcome.")
                .build(),
            send_duration: duration(
                "messaging.client.operation.duration",
                "How long each send took until the broker acknowledged or refused it.",
            ),
            request_duration: duration(
                "prosody.request.duration",
                "How long each subsystem took to answer a request (the timeout when none did).",
            ),
            request_outcomes: meter
                .u64_counter("prosody.request.outcomes")
                .with_unit("{outcome}")
                .with_description("Request outcomes, by subsystem and outcome.")
                .build(),
            store_duration: duration(
                "prosody.store.operation.duration",
                "How long each store operation took.",
            ),
            store_errors: meter
                .u64_counter("prosody.store.operation.errors")
                .with_unit("{error}")
                .with_description("Store operations that failed.")
                .build(),
            partitions: Mutex::default(),
            watched,
        })))
    }

    /// No instruments: nothing is recorded.
    #[must_use]
    pub fn off() -> Self {
        Self(None)
    }

    /// Whether anything is recorded.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.0.is_some()
    }

    /// The meter of one partition: the same one each time it is asked.
    #[must_use]
    pub fn partition(&self, topic: &Topic, partition: i32) -> PartitionMeter {
        let Some(instruments) = &self.0 else {
            return PartitionMeter::default();
        };
        let mut partitions = instruments
            .partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        partitions
            .entry((Arc::clone(topic), partition))
            .or_insert_with(|| PartitionMeter::bind(instruments, topic, partition))
            .clone()
    }

    /// Reports the partitions of a runtime's `status` in the gauges while
    /// it lives.
    pub(crate) fn watch(&self, status: Weak<dyn Held>) {
        if let Some(instruments) = &self.0 {
            let shared = vec![
                KeyValue::new("messaging.system", instruments.system),
                KeyValue::new(
                    "messaging.consumer.group.name",
                    Arc::clone(&instruments.group),
                ),
            ];
            instruments.watched.add(status, shared);
        }
    }

    /// One send to `topic` finished after `elapsed`: acknowledged, or
    /// refused with `error` (its kind, a short fixed name).
    pub fn sent(&self, topic: &Topic, elapsed: Duration, error: Option<&'static str>) {
        let Some(instruments) = &self.0 else {
            return;
        };
        let mut attributes = vec![
            KeyValue::new("messaging.system", instruments.system),
            KeyValue::new("messaging.operation.name", "send"),
            KeyValue::new("messaging.destination.name", Arc::clone(topic)),
        ];
        if let Some(error) = error {
            attributes.push(KeyValue::new("error.type", error));
        }
        instruments
            .send_duration
            .record(elapsed.as_secs_f64(), &attributes);
        instruments.sent.add(1, &attributes);
    }
}

impl Metrics {
    /// Subsystem `subsystem` answered a request with `outcome` (a fixed
    /// name: `success`, `handler_failed`, `timeout`, ...) after `elapsed`.
    pub fn requested(&self, subsystem: &str, outcome: &'static str, elapsed: Duration) {
        let Some(instruments) = &self.0 else {
            return;
        };
        let attributes = [
            KeyValue::new(
                "messaging.consumer.group.name",
                Arc::clone(&instruments.group),
            ),
            KeyValue::new("prosody.subsystem", subsystem.to_owned()),
            KeyValue::new("prosody.outcome", outcome),
        ];
        instruments
            .request_duration
            .record(elapsed.as_secs_f64(), &attributes);
        instruments.request_outcomes.add(1, &attributes);
    }
}

impl Instruments {
    /// The attributes every partition series carries.
    fn partition_attributes(&self, topic: &Topic, partition: i32) -> Vec<KeyValue> {
        vec![
            KeyValue::new("messaging.system", self.system),
            KeyValue::new("messaging.consumer.group.name", Arc::clone(&self.group)),
            KeyValue::new("messaging.destination.name", Arc::clone(topic)),
            KeyValue::new("messaging.destination.partition.id", partition.to_string()),
        ]
    }
}
