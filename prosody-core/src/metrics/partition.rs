//! The meter of one partition: its series bound once, so recording on the
//! per-event path looks nothing up.

use super::Instruments;
use crate::event::Topic;
use opentelemetry::KeyValue;
use opentelemetry::metrics::{BoundCounter, BoundHistogram, Counter, Histogram};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How a handler call ended, as `messaging.process.duration` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Ending {
    /// It succeeded.
    Success,
    /// It failed, and may succeed if tried again.
    Transient,
    /// It failed, and would fail again.
    Permanent,
    /// It failed, and its partition stops.
    Terminal,
    /// It ran past its deadline and was cancelled.
    Cancelled,
    /// It was dropped before it ended: its partition was let go of.
    Dropped,
}

impl Ending {
    /// Its attribute value.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Transient => "transient",
            Self::Permanent => "permanent",
            Self::Terminal => "terminal",
            Self::Cancelled => "cancelled",
            Self::Dropped => "dropped",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The event kinds, in the order of the process series.
const KINDS: [&str; 3] = ["message", "timer", "excise"];

/// What a stage did, as `prosody.stage.events` counts it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Action {
    Retried,
    Deferred,
    DedupHit,
    Rejected,
    FailureSent,
    DecodeFailed,
}

impl Action {
    fn name(self) -> (&'static str, &'static str) {
        match self {
            Self::Retried => ("retry", "retried"),
            Self::Deferred => ("defer", "deferred"),
            Self::DedupHit => ("dedup", "duplicate"),
            Self::Rejected => ("monopolization", "rejected"),
            Self::FailureSent => ("failure", "routed"),
            Self::DecodeFailed => ("decode", "failed"),
        }
    }
}

/// One partition's meter; [`PartitionMeter::default`] records nothing.
///
/// Invariant: every series of the partition carries the same four
/// attributes (system, group, topic, partition); the per-event ones are
/// bound on first use and kept, so a record costs no attribute lookup.
#[derive(Clone, Debug, Default)]
pub struct PartitionMeter(Option<Arc<Bound>>);

#[derive(Debug)]
pub(crate) struct Bound {
    process_duration: Histogram<f64>,
    stage: Counter<u64>,
    scheduler_wait: Histogram<f64>,
    attributes: Vec<KeyValue>,
    /// By kind, then outcome: bound on first use, so only the pairs that
    /// happen appear.
    process: [[OnceLock<BoundHistogram<f64>>; 6]; 3],
    consumed: BoundCounter<u64>,
    actions: [OnceLock<BoundCounter<u64>>; 6],
    waited: OnceLock<BoundHistogram<f64>>,
}

impl PartitionMeter {
    pub(super) fn bind(instruments: &Instruments, topic: &Topic, partition: i32) -> Self {
        let attributes = instruments.partition_attributes(topic, partition);
        let mut consumed = attributes.clone();
        consumed.push(KeyValue::new("messaging.operation.name", "receive"));
        Self(Some(Arc::new(Bound {
            process_duration: instruments.process.clone(),
            stage: instruments.stage.clone(),
            scheduler_wait: instruments.scheduler_wait.clone(),
            consumed: instruments.consumed.bind(&consumed),
            attributes,
            process: Default::default(),
            actions: Default::default(),
            waited: OnceLock::new(),
        })))
    }

    /// Whether anything is recorded.
    #[must_use]
    pub fn enabled(&self) -> bool {
        self.0.is_some()
    }

    /// A handler call of `kind` ended with `outcome` after `elapsed`.
    pub fn processed(&self, kind: &str, outcome: Ending, elapsed: Duration) {
        let Some(bound) = &self.0 else {
            return;
        };
        let Some((k, kind)) = KINDS.iter().enumerate().find(|(_, known)| **known == kind) else {
            return;
        };
        let Some(series) = bound.process.get(k).and_then(|s| s.get(outcome.index())) else {
            return;
        };
        series
            .get_or_init(|| {
                let mut attributes = bound.attributes.clone();
                attributes.extend([
                    KeyValue::new("messaging.operation.name", "process"),
                    KeyValue::new("prosody.event.kind", *kind),
                    KeyValue::new("prosody.outcome", outcome.name()),
                ]);
                bound.process_duration.bind(&attributes)
            })
            .record(elapsed.as_secs_f64());
    }

    /// `records` records arrived from the broker.
    pub(crate) fn consumed(&self, records: usize) {
        if let Some(bound) = &self.0 {
            bound
                .consumed
                .add(u64::try_from(records).unwrap_or(u64::MAX));
        }
    }

    /// A stage did `action`.
    pub(crate) fn count(&self, action: Action) {
        let Some(bound) = &self.0 else {
            return;
        };
        let Some(series) = bound.actions.get(action as usize) else {
            return;
        };
        series
            .get_or_init(|| {
                let (stage, did) = action.name();
                let mut attributes = bound.attributes.clone();
                attributes.extend([
                    KeyValue::new("prosody.stage", stage),
                    KeyValue::new("prosody.stage.action", did),
                ]);
                bound.stage.bind(&attributes)
            })
            .add(1);
    }

    /// An attempt waited `waited` for a scheduler permit.
    pub(crate) fn waited(&self, waited: Duration) {
        let Some(bound) = &self.0 else {
            return;
        };
        bound
            .waited
            .get_or_init(|| bound.scheduler_wait.bind(&bound.attributes))
            .record(waited.as_secs_f64());
    }
}
