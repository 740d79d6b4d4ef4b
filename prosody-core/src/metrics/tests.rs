use super::{Held, Metrics, PartitionMeter, Readings};
use crate::error::HandlerError;
use crate::event::{Event, Timer};
use crate::handler::EventRequest;
use crate::telemetry::{NoTelemetry, TelemetryLayer};
use crate::{clock, testkit};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Context as TaskContext;
use tower::{Layer, Service, ServiceExt, service_fn};

/// Instruments over an in-memory exporter, and the exporter.
fn instruments() -> (Metrics, SdkMeterProvider, InMemoryMetricExporter) {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let metrics = Metrics::new(&provider.meter("test"), "memory", "group");
    (metrics, provider, exporter)
}

/// Each point of metric `name` collected now: its attributes and its
/// value (a histogram's count). A collection that observed nothing at all
/// exports no batch: then there is no point.
fn points(
    provider: &SdkMeterProvider,
    exporter: &InMemoryMetricExporter,
    name: &str,
) -> Vec<(BTreeMap<String, String>, f64)> {
    let before = exporter.get_finished_metrics().expect("metrics").len();
    provider.force_flush().expect("flush");
    let batches = exporter.get_finished_metrics().expect("metrics");
    let mut found = Vec::new();
    let Some(last) = batches.last().filter(|_| batches.len() > before) else {
        return found;
    };
    for scope in last.scope_metrics() {
        for metric in scope.metrics().filter(|m| m.name() == name) {
            let attributes = |kvs: &mut dyn Iterator<Item = &opentelemetry::KeyValue>| {
                kvs.map(|kv| (kv.key.to_string(), kv.value.to_string()))
                    .collect::<BTreeMap<_, _>>()
            };
            #[allow(clippy::cast_precision_loss)]
            match metric.data() {
                AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                    for p in h.data_points() {
                        found.push((attributes(&mut p.attributes()), p.count() as f64));
                    }
                }
                AggregatedMetrics::I64(MetricData::Gauge(g)) => {
                    for p in g.data_points() {
                        found.push((attributes(&mut p.attributes()), p.value() as f64));
                    }
                }
                AggregatedMetrics::F64(MetricData::Gauge(g)) => {
                    for p in g.data_points() {
                        found.push((attributes(&mut p.attributes()), p.value()));
                    }
                }
                AggregatedMetrics::U64(MetricData::Sum(s)) => {
                    for p in s.data_points() {
                        found.push((attributes(&mut p.attributes()), p.value() as f64));
                    }
                }
                _ => {}
            }
        }
    }
    found
}

/// How one generated call ends.
#[derive(Clone, Copy, Debug)]
enum End {
    Succeed,
    Fail(crate::error::Category),
    /// Dropped while it runs, before its deadline.
    Drop,
    /// Dropped while it runs, after its deadline.
    Expire,
}

fn end() -> impl Strategy<Value = End> {
    use crate::error::Category::{Permanent, Terminal, Transient};
    prop_oneof![
        3 => Just(End::Succeed),
        1 => Just(End::Fail(Transient)),
        1 => Just(End::Fail(Permanent)),
        1 => Just(End::Fail(Terminal)),
        1 => Just(End::Drop),
        1 => Just(End::Expire),
    ]
}

fn outcome(end: End) -> &'static str {
    match end {
        End::Succeed => "success",
        End::Fail(category) => match category {
            crate::error::Category::Transient => "transient",
            crate::error::Category::Permanent => "permanent",
            crate::error::Category::Terminal => "terminal",
        },
        End::Drop => "dropped",
        End::Expire => "cancelled",
    }
}

/// Runs one call of `kind` (0 a message, 1 a timer) through the telemetry
/// stage, ending as `end`.
async fn call(meter: &PartitionMeter, timer: bool, key: &str, end: End) {
    let (mut request, _, _) = testkit::message(key, (), None);
    if timer {
        request.event = Event::Timer(Timer::new(key, clock::now()));
    }
    request.context = request.context.clone().with_meter(meter.clone());
    if matches!(end, End::Expire) {
        request.context = request
            .context
            .clone()
            .with_deadline(tokio::time::Instant::now());
    }
    let handler = service_fn(move |_: EventRequest<()>| async move {
        match end {
            End::Succeed => Ok(()),
            End::Fail(category) => Err(HandlerError::new(category, "scripted")),
            End::Drop | End::Expire => std::future::pending().await,
        }
    });
    let mut service = TelemetryLayer::new(NoTelemetry).layer(handler);
    let ready = service.ready().await.expect("ready");
    let mut future = pin!(ready.call(request));
    let waker = std::task::Waker::noop();
    // A call still pending is dropped here, as the timeout stage or a
    // revocation drops it.
    let _ = future.as_mut().poll(&mut TaskContext::from_waker(waker));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Each handler call is measured exactly once, under its kind and how
    /// it ended, and no series carries a key (bounded cardinality).
    #[test]
    fn each_call_is_measured_once_by_kind_and_outcome(
        calls in proptest::collection::vec((any::<bool>(), 0..20u8, end()), 1..60),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        let (metrics, provider, exporter) = instruments();
        let meter = metrics.partition(&Arc::from("topic"), 0);
        let mut expected: BTreeMap<(String, String), f64> = BTreeMap::new();
        runtime.block_on(async {
            for (timer, key, end) in &calls {
                call(&meter, *timer, &format!("key-{key}"), *end).await;
                let kind = if *timer { "timer" } else { "message" };
                *expected.entry((kind.to_owned(), outcome(*end).to_owned())).or_default() += 1.0;
            }
        });
        let mut seen: BTreeMap<(String, String), f64> = BTreeMap::new();
        for (attributes, count) in points(&provider, &exporter, "messaging.process.duration") {
            let allowed = [
                "messaging.system", "messaging.consumer.group.name", "messaging.destination.name",
                "messaging.destination.partition.id", "messaging.operation.name",
                "prosody.event.kind", "prosody.outcome",
            ];
            prop_assert!(attributes.keys().all(|k| allowed.contains(&k.as_str())), "{attributes:?}");
            prop_assert_eq!(attributes.get("messaging.destination.partition.id").map(String::as_str), Some("0"));
            let kind = attributes.get("prosody.event.kind").cloned().unwrap_or_default();
            let ended = attributes.get("prosody.outcome").cloned().unwrap_or_default();
            *seen.entry((kind, ended)).or_default() += count;
        }
        prop_assert_eq!(seen, expected);
    }
}

/// With metrics off, a request records nothing and builds no meter.
#[test]
fn off_records_nothing() {
    let metrics = Metrics::off();
    assert!(!metrics.enabled());
    assert!(!metrics.partition(&Arc::from("t"), 0).enabled());
}

/// One partition held, with readings the test sets, until let go of.
struct One(std::sync::Mutex<Option<Readings>>);

impl Held for One {
    fn readings(&self) -> Vec<(crate::broker::TopicPartition, Readings)> {
        let held = *self.0.lock().expect("held");
        held.map(|readings| (crate::broker::TopicPartition::new("orders", 3), readings))
            .into_iter()
            .collect()
    }
}

impl One {
    fn set(&self, readings: Option<Readings>) {
        *self.0.lock().expect("held") = readings;
    }
}

/// Readings of a partition held with nothing received, settled or
/// scheduled: both offsets unknown.
const IDLE: Readings = Readings {
    committed: -1,
    high: -1,
    oldest: -1,
    timer_due: -1,
    unsettled: 0,
    in_flight: 0,
    waiting: 0,
    paused: false,
    deferred_keys: -1,
    deferred_records: -1,
};

/// Instruments watching one partition held with `readings`.
fn watching(readings: Readings) -> (Arc<One>, Arc<dyn Held>, impl Fn(&str) -> Option<f64>) {
    let (metrics, provider, exporter) = instruments();
    let runtime = Arc::new(One(std::sync::Mutex::new(Some(readings))));
    let held: Arc<dyn Held> = runtime.clone();
    metrics.watch(Arc::downgrade(&held));
    let value = move |name: &str| {
        let _ = &metrics;
        let found = points(&provider, &exporter, name);
        assert!(found.len() <= 1, "{name}: {found:?}");
        let (attributes, value) = found.into_iter().next()?;
        assert_eq!(
            attributes
                .get("messaging.destination.name")
                .map(String::as_str),
            Some("orders")
        );
        assert_eq!(
            attributes
                .get("messaging.destination.partition.id")
                .map(String::as_str),
            Some("3")
        );
        Some(value)
    };
    (runtime, held, value)
}

/// `millis` (a test's small span) in seconds.
fn seconds(millis: i64) -> f64 {
    f64::from(i32::try_from(millis).unwrap_or(i32::MAX)) / 1000.0
}

/// The gauges read each held partition's state at collection: lag is the
/// high watermark minus the committed offset, and ages count from the
/// oldest unsettled record and the oldest timer not yet taken.
#[tokio::test(start_paused = true)]
async fn the_gauges_read_the_partitions_held() {
    let now = clock::now().as_millis();
    // Timers are due on whole seconds: the expected lag depends on `now`.
    let timer_due = (now / 1000 - 4) * 1000;
    let (runtime, held, value) = watching(Readings {
        committed: 90,
        high: 100,
        oldest: now - 2_500,
        timer_due,
        unsettled: 10,
        in_flight: 3,
        waiting: 7,
        paused: true,
        deferred_keys: 2,
        deferred_records: 5,
    });
    let value = |name: &str| value(name).unwrap_or_else(|| panic!("{name}: no series"));
    assert!((value("prosody.partition.lag") - 10.0).abs() < f64::EPSILON);
    assert!((value("prosody.partition.in_flight") - 3.0).abs() < f64::EPSILON);
    assert!((value("prosody.partition.waiting") - 7.0).abs() < f64::EPSILON);
    assert!((value("prosody.partition.unsettled") - 10.0).abs() < f64::EPSILON);
    assert!((value("prosody.partition.paused") - 1.0).abs() < f64::EPSILON);
    assert!((value("prosody.defer.keys") - 2.0).abs() < f64::EPSILON);
    assert!((value("prosody.defer.records") - 5.0).abs() < f64::EPSILON);
    let age = value("prosody.partition.lag.duration");
    assert!((2.5..3.5).contains(&age), "{age}");
    let timer_lag = value("prosody.timer.lag");
    // The wall clock moves on while the gauges are read: allow it half a second.
    let due_ago = seconds(now - timer_due);
    assert!(
        (due_ago..due_ago + 0.5).contains(&timer_lag),
        "{timer_lag}, due {due_ago} s before the test began"
    );
    drop((held, runtime));
}

/// The partition gauges: a series from assignment on (the lag once both
/// offsets are known), and zero at every collection once the partition
/// is let go of, and once its runtime is gone: its next owner reports it.
#[tokio::test(start_paused = true)]
async fn a_partition_let_go_of_reports_zero_from_then_on() {
    let (runtime, held, value) = watching(IDLE);
    let counts = [
        "prosody.partition.in_flight",
        "prosody.partition.waiting",
        "prosody.partition.unsettled",
        "prosody.partition.paused",
        "prosody.partition.lag.duration",
    ];
    for name in counts {
        assert_eq!(value(name), Some(0.0), "{name}: held, a series at 0");
    }
    assert_eq!(
        value("prosody.partition.lag"),
        None,
        "no lag before both offsets are known"
    );
    runtime.set(Some(Readings {
        committed: 4,
        high: 9,
        unsettled: 5,
        in_flight: 1,
        waiting: 4,
        paused: true,
        oldest: clock::now().as_millis() - 1_000,
        ..IDLE
    }));
    assert_eq!(value("prosody.partition.lag"), Some(5.0));
    runtime.set(None);
    for name in counts.into_iter().chain(["prosody.partition.lag"]) {
        for collection in 0..2 {
            assert_eq!(
                value(name),
                Some(0.0),
                "{name}: let go of, collection {collection}"
            );
        }
    }
    drop((held, runtime));
    assert_eq!(
        value("prosody.partition.lag"),
        Some(0.0),
        "a runtime gone reports zero from then on"
    );
}

/// The age of the oldest unsettled record is 0 while the partition is
/// held and nothing is unsettled, before and after there was.
#[tokio::test(start_paused = true)]
async fn the_lag_duration_is_zero_while_nothing_is_unsettled() {
    let (runtime, held, value) = watching(IDLE);
    assert_eq!(value("prosody.partition.lag.duration"), Some(0.0));
    runtime.set(Some(Readings {
        oldest: clock::now().as_millis() - 2_000,
        unsettled: 1,
        ..IDLE
    }));
    let age = value("prosody.partition.lag.duration").expect("a series");
    assert!((2.0..3.0).contains(&age), "{age}");
    runtime.set(Some(IDLE));
    assert_eq!(value("prosody.partition.lag.duration"), Some(0.0));
    drop((held, runtime));
}

/// The timer lag has a series exactly while a held partition holds a timer
/// not yet taken: none before the first, 0 before it is due, none once the
/// last ran or was cleared, none once the partition is let go of.
#[tokio::test(start_paused = true)]
async fn the_timer_lag_has_a_series_only_while_a_timer_waits() {
    let (runtime, held, value) = watching(IDLE);
    assert_eq!(value("prosody.timer.lag"), None, "before the first timer");
    let now = clock::now().as_millis();
    let second = now / 1000;
    runtime.set(Some(Readings {
        timer_due: (second + 60) * 1000,
        ..IDLE
    }));
    assert_eq!(value("prosody.timer.lag"), Some(0.0), "not due yet");
    runtime.set(Some(Readings {
        timer_due: (second - 3) * 1000,
        ..IDLE
    }));
    let lag = value("prosody.timer.lag").expect("a due timer");
    let due_ago = seconds(now - (second - 3) * 1000);
    assert!(
        (due_ago..due_ago + 0.5).contains(&lag),
        "{lag}, due {due_ago} s ago"
    );
    runtime.set(Some(IDLE));
    assert_eq!(
        value("prosody.timer.lag"),
        None,
        "the last timer ran or was cleared"
    );
    runtime.set(Some(Readings {
        timer_due: second * 1000,
        ..IDLE
    }));
    assert!(value("prosody.timer.lag").is_some());
    runtime.set(None);
    assert_eq!(value("prosody.timer.lag"), None, "let go of");
    drop((held, runtime));
    assert_eq!(value("prosody.timer.lag"), None, "its runtime gone");
}
