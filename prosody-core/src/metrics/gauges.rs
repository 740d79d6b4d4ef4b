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
    /// The group's committed offset: read from the broker at assignment,
    /// then the offset last committed (a group that never committed: the
    /// first offset received).
    pub(crate) committed: i64,
    /// The high watermark the consumer last saw.
    pub(crate) high: i64,
    /// The timestamp (milliseconds) of the oldest unsettled record.
    pub(crate) oldest: i64,
    /// The due time (milliseconds) of the earliest timer not yet taken to
    /// run, due or not.
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

/// How one gauge reads a held partition at `now` (milliseconds): `None`
/// when the partition holds no subject for it now (no series).
type Reading = fn(&Readings, i64) -> Option<i64>;

/// What a gauge reports for a partition the member let go of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gone {
    /// Zero, at every collection from then on: its next owner reports it.
    Zero,
    /// No series.
    Nothing,
}

/// One gauge: its name, unit, description, reading, what it reports once
/// the partition is let go of, and whether it reports seconds (the
/// reading's milliseconds over 1000) rather than a count.
struct Gauge {
    name: &'static str,
    unit: &'static str,
    description: &'static str,
    reading: Reading,
    gone: Gone,
    seconds: bool,
}

const GAUGES: [Gauge; 9] = [
    Gauge {
        name: "prosody.partition.lag",
        unit: "{record}",
        description: "Records behind: the partition's high watermark minus the group's committed offset.",
        reading: |state, _| {
            (state.high >= 0 && state.committed >= 0).then(|| (state.high - state.committed).max(0))
        },
        gone: Gone::Zero,
        seconds: false,
    },
    Gauge {
        name: "prosody.partition.in_flight",
        unit: "{record}",
        description: "Records being handled now.",
        reading: |state, _| i64::try_from(state.in_flight).ok(),
        gone: Gone::Zero,
        seconds: false,
    },
    Gauge {
        name: "prosody.partition.waiting",
        unit: "{record}",
        description: "Records received and waiting behind an earlier record of their key.",
        reading: |state, _| i64::try_from(state.waiting).ok(),
        gone: Gone::Zero,
        seconds: false,
    },
    Gauge {
        name: "prosody.partition.paused",
        unit: "1",
        description: "1 while the partition is paused because too many records are unsettled, else 0.",
        reading: |state, _| Some(i64::from(state.paused)),
        gone: Gone::Zero,
        seconds: false,
    },
    Gauge {
        name: "prosody.partition.unsettled",
        unit: "{record}",
        description: "Records received and not yet settled.",
        reading: |state, _| i64::try_from(state.unsettled).ok(),
        gone: Gone::Zero,
        seconds: false,
    },
    Gauge {
        name: "prosody.partition.lag.duration",
        unit: "s",
        description: "Age of the oldest unsettled record (now minus its timestamp); 0 when none is unsettled.",
        reading: |state, now| {
            Some(if state.oldest >= 0 {
                (now - state.oldest).max(0)
            } else {
                0
            })
        },
        gone: Gone::Zero,
        seconds: true,
    },
    Gauge {
        name: "prosody.timer.lag",
        unit: "s",
        description: "Now minus the due time of the earliest timer not yet taken to run (0 before it is due); \
                      no series while the partition holds none.",
        reading: |state, now| (state.timer_due >= 0).then(|| (now - state.timer_due).max(0)),
        gone: Gone::Nothing,
        seconds: true,
    },
    Gauge {
        name: "prosody.defer.keys",
        unit: "{key}",
        description: "Keys with deferred records, as the defer store counts them.",
        reading: |state, _| (state.deferred_keys >= 0).then_some(state.deferred_keys),
        gone: Gone::Zero,
        seconds: false,
    },
    Gauge {
        name: "prosody.defer.records",
        unit: "{record}",
        description: "Records deferred for a later retry, as the defer store counts them.",
        reading: |state, _| (state.deferred_records >= 0).then_some(state.deferred_records),
        gone: Gone::Zero,
        seconds: false,
    },
];

/// The partitions one gauge reported for, by their attributes' text.
///
/// Invariant: for a gauge whose partitions let go of report zero
/// ([`Gone::Zero`]), every partition held at some collection is
/// remembered, and one remembered and not held now (let go of, or its
/// runtime is gone) is observed as zero at every collection of every
/// reader from then on, so a last value kept by a reader never outlives
/// the partition's move: summed over the members, each partition counts
/// once. A partition held whose reading is `None` is not observed at all
/// (no series): observable gauges export only the points of the latest
/// collection. For [`Gone::Nothing`] nothing is remembered. The set is
/// bounded by the partitions the process ever held.
struct Reported {
    gone: Gone,
    held: Mutex<FastMap<String, Vec<KeyValue>>>,
}

impl Reported {
    fn new(gone: Gone) -> Self {
        Self {
            gone,
            held: Mutex::default(),
        }
    }

    /// Observes each held partition's `(value, attributes)` that has a
    /// value, and zero for each remembered partition not held now.
    fn observe(
        &self,
        now: Vec<(Option<i64>, Vec<KeyValue>)>,
        mut observe: impl FnMut(i64, &[KeyValue]),
    ) {
        let mut remembered = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let mut current = FastSet::default();
        for (value, attributes) in now {
            if let Some(value) = value {
                observe(value, &attributes);
            }
            if self.gone == Gone::Zero {
                let text = format!("{attributes:?}");
                current.insert(text.clone());
                remembered.entry(text).or_insert(attributes);
            }
        }
        for (text, attributes) in remembered.iter() {
            if !current.contains(text) {
                observe(0, attributes);
            }
        }
    }
}

/// Each held partition's reading of `reading` now, with its attributes.
fn read(watched: &Watched, reading: Reading) -> Vec<(Option<i64>, Vec<KeyValue>)> {
    let now = clock::now().as_millis();
    let mut values = Vec::new();
    watched.each(|state, attributes| values.push((reading(state, now), attributes)));
    values
}

/// Registers the gauges with `meter`, reading `watched` at each collection.
pub(crate) fn register(meter: &Meter, watched: &Arc<Watched>) {
    for gauge in GAUGES {
        let watched = Arc::clone(watched);
        let reported = Reported::new(gauge.gone);
        let reading = gauge.reading;
        if gauge.seconds {
            meter
                .f64_observable_gauge(gauge.name)
                .with_unit(gauge.unit)
                .with_description(gauge.description)
                .with_callback(move |observer| {
                    reported.observe(read(&watched, reading), |millis, attributes| {
                        #[allow(
                            clippy::cast_precision_loss,
                            reason = "ages fit an f64's mantissa"
                        )]
                        observer.observe(millis as f64 / 1_000.0, attributes);
                    });
                })
                .build();
        } else {
            meter
                .i64_observable_gauge(gauge.name)
                .with_unit(gauge.unit)
                .with_description(gauge.description)
                .with_callback(move |observer| {
                    reported.observe(read(&watched, reading), |value, attributes| {
                        observer.observe(value, attributes);
                    });
                })
                .build();
        }
    }
}
