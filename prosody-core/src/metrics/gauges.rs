//! The gauges of the partitions a client holds, read when the metrics are
//! collected (never on the per-event path).

use crate::broker::TopicPartition;
use crate::clock;
use crate::hash::{FastMap, FastSet};
use opentelemetry::KeyValue;
use opentelemetry::metrics::Meter;
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// What the gauges read of one partition; `-1` for an offset or time not
/// known yet.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Readings {
    /// The offset last committed (before the first commit, the first one
    /// received).
    pub(crate) committed: i64,
    /// The high watermark the consumer last saw.
    pub(crate) high: i64,
    /// The timestamp (milliseconds) of the oldest unsettled record.
    pub(crate) oldest: i64,
    /// The due time (milliseconds) of the earliest timer not yet taken.
    pub(crate) timer_due: i64,
    pub(crate) unsettled: usize,
    pub(crate) in_flight: usize,
    pub(crate) waiting: usize,
    pub(crate) paused: bool,
    /// Keys with deferred records, and those records (`-1` until the
    /// partition's stores reported them).
    pub(crate) deferred_keys: i64,
    pub(crate) deferred_records: i64,
}

/// The partitions a runtime holds, as the gauges read them.
pub(crate) trait Held: Send + Sync {
    /// Each partition held now, with its readings.
    fn readings(&self) -> Vec<(TopicPartition, Readings)>;
}

/// The runtimes whose partitions the gauges report, each with the
/// attributes its series share.
///
/// Invariant: a runtime that is gone is forgotten at the next collection.
#[derive(Debug, Default)]
pub(crate) struct Watched(Mutex<Vec<Runtime>>);

/// A watched runtime, and the attributes its series share.
type Runtime = (Weak<dyn Held>, Vec<KeyValue>);

impl Watched {
    pub(crate) fn add(&self, status: Weak<dyn Held>, shared: Vec<KeyValue>) {
        self.lock().push((status, shared));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Runtime>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Calls `each` with every held partition's state and attributes.
    fn each(&self, mut each: impl FnMut(&Readings, Vec<KeyValue>)) {
        let mut watched = self.lock();
        watched.retain(|(status, _)| status.strong_count() > 0);
        for (status, shared) in watched.iter() {
            let Some(status) = status.upgrade() else {
                continue;
            };
            for (tp, state) in status.readings() {
                let mut attributes = shared.clone();
                attributes.extend([
                    KeyValue::new("messaging.destination.name", Arc::clone(&tp.topic)),
                    KeyValue::new(
                        "messaging.destination.partition.id",
                        tp.partition.to_string(),
                    ),
                ]);
                each(&state, attributes);
            }
        }
    }
}

/// One gauge: a name, its unit and description, and how to read it from a
/// partition (`None`: nothing to report for that partition now).
type Reading = fn(&Readings, i64) -> Option<i64>;

const GAUGES: [(&str, &str, &str, Reading); 7] = [
    (
        "prosody.partition.lag",
        "{record}",
        "Records behind: the partition's high watermark minus the group's committed offset.",
        |state, _| {
            (state.high >= 0 && state.committed >= 0).then(|| (state.high - state.committed).max(0))
        },
    ),
    (
        "prosody.partition.in_flight",
        "{record}",
        "Records being handled now.",
        |state, _| i64::try_from(state.in_flight).ok(),
    ),
    (
        "prosody.partition.waiting",
        "{record}",
        "Records received and waiting behind an earlier record of their key.",
        |state, _| i64::try_from(state.waiting).ok(),
    ),
    (
        "prosody.partition.paused",
        "1",
        "1 while the partition is paused because too many records are unsettled, else 0.",
        |state, _| Some(i64::from(state.paused)),
    ),
    (
        "prosody.partition.unsettled",
        "{record}",
        "Records received and not yet settled.",
        |state, _| i64::try_from(state.unsettled).ok(),
    ),
    (
        "prosody.defer.keys",
        "{key}",
        "Keys with deferred records, as the defer store counts them.",
        |state, _| (state.deferred_keys >= 0).then_some(state.deferred_keys),
    ),
    (
        "prosody.defer.records",
        "{record}",
        "Records deferred for a later retry, as the defer store counts them.",
        |state, _| (state.deferred_records >= 0).then_some(state.deferred_records),
    ),
];

/// Ages in seconds: of the oldest unsettled record, and of the oldest due
/// timer not yet fired.
const AGES: [(&str, &str, Reading); 2] = [
    (
        "prosody.partition.lag.duration",
        "Age of the oldest unsettled record (now minus its timestamp).",
        |state, now| (state.oldest >= 0).then(|| (now - state.oldest).max(0)),
    ),
    (
        "prosody.timer.lag",
        "Now minus the due time of the oldest timer that is due and has not fired.",
        |state, now| (state.timer_due >= 0).then(|| (now - state.timer_due).max(0)),
    ),
];

/// Every series one gauge ever reported, by its attributes' text.
///
/// Invariant: a series reported before and not now (its partition was let
/// go of, or its runtime is gone) is reported as zero from then on, at
/// every collection of every reader, so a last value kept by a cumulative
/// reader never outlives the partition's move: summed over the members,
/// each partition counts once. The set is bounded by the partitions the
/// process ever held.
#[derive(Default)]
struct Reported(Mutex<FastMap<String, Vec<KeyValue>>>);

impl Reported {
    /// Observes each `(value, attributes)` now, and zero for each series
    /// reported before and not now.
    fn observe<T: Copy + Default>(
        &self,
        now: Vec<(T, Vec<KeyValue>)>,
        mut observe: impl FnMut(T, &[KeyValue]),
    ) {
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut current = FastSet::default();
        for (value, attributes) in now {
            observe(value, &attributes);
            let text = format!("{attributes:?}");
            current.insert(text.clone());
            seen.entry(text).or_insert(attributes);
        }
        for (text, attributes) in seen.iter() {
            if !current.contains(text) {
                observe(T::default(), attributes);
            }
        }
    }
}

/// Registers the gauges with `meter`, reading `watched` at each collection.
pub(crate) fn register(meter: &Meter, watched: &Arc<Watched>) {
    for (name, unit, description, reading) in GAUGES {
        let watched = Arc::clone(watched);
        let reported = Reported::default();
        meter
            .i64_observable_gauge(name)
            .with_unit(unit)
            .with_description(description)
            .with_callback(move |observer| {
                let now = clock::now().as_millis();
                let mut values = Vec::new();
                watched.each(|state, attributes| {
                    if let Some(value) = reading(state, now) {
                        values.push((value, attributes));
                    }
                });
                reported.observe(values, |value, attributes| {
                    observer.observe(value, attributes);
                });
            })
            .build();
    }
    for (name, description, reading) in AGES {
        let watched = Arc::clone(watched);
        let reported = Reported::default();
        meter
            .f64_observable_gauge(name)
            .with_unit("s")
            .with_description(description)
            .with_callback(move |observer| {
                let now = clock::now().as_millis();
                let mut values = Vec::new();
                watched.each(|state, attributes| {
                    if let Some(millis) = reading(state, now) {
                        #[allow(
                            clippy::cast_precision_loss,
                            reason = "ages fit an f64's mantissa"
                        )]
                        values.push((millis as f64 / 1_000.0, attributes));
                    }
                });
                reported.observe(values, |value, attributes| {
                    observer.observe(value, attributes);
                });
            })
            .build();
    }
}
