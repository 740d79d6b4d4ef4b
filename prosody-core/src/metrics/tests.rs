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

/// Each point of metric `name`: its attributes and its value (a
/// histogram's count).
fn points(
    provider: &SdkMeterProvider,
    exporter: &InMemoryMetricExporter,
    name: &str,
) -> Vec<(BTreeMap<String, String>, f64)> {
    provider.force_flush().expect("flush");
    let batches = exporter.get_finished_metrics().expect("metrics");
    let mut found = Vec::new();
    let Some(last) = batches.last() else {
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

/// The gauges read each held partition's state at collection: lag is the
/// high watermark minus the committed offset, and ages count from the
/// oldest unsettled record and the oldest due timer.
#[tokio::test(start_paused = true)]
async fn the_gauges_read_the_partitions_held() {
    /// One partition held, with fixed readings, until let go of.
    struct One(std::sync::Mutex<Option<Readings>>);
    impl Held for One {
        fn readings(&self) -> Vec<(crate::broker::TopicPartition, Readings)> {
            let held = *self.0.lock().expect("held");
            held.map(|readings| (crate::broker::TopicPartition::new("orders", 3), readings))
                .into_iter()
                .collect()
        }
    }
    let (metrics, provider, exporter) = instruments();
    let now = clock::now().as_millis();
    let runtime: Arc<One> = Arc::new(One(std::sync::Mutex::new(Some(Readings {
        committed: 90,
        high: 100,
        oldest: now - 2_500,
        timer_due: (now / 1000 - 4) * 1000,
        unsettled: 10,
        in_flight: 3,
        waiting: 7,
        paused: false,
        deferred_keys: 2,
        deferred_records: 5,
    }))));
    let held: Arc<dyn Held> = runtime.clone();
    metrics.watch(Arc::downgrade(&held));
    let value = |name: &str| {
        let found = points(&provider, &exporter, name);
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        let (attributes, value) = &found[0];
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
        *value
    };
    assert!((value("prosody.partition.lag") - 10.0).abs() < f64::EPSILON);
    assert!((value("prosody.partition.in_flight") - 3.0).abs() < f64::EPSILON);
    assert!((value("prosody.partition.waiting") - 7.0).abs() < f64::EPSILON);
    assert!((value("prosody.partition.unsettled") - 10.0).abs() < f64::EPSILON);
    assert!((value("prosody.defer.keys") - 2.0).abs() < f64::EPSILON);
    assert!((value("prosody.defer.records") - 5.0).abs() < f64::EPSILON);
    let age = value("prosody.partition.lag.duration");
    assert!((2.5..3.5).contains(&age), "{age}");
    let timer_lag = value("prosody.timer.lag");
    assert!((4.0..5.0).contains(&timer_lag), "{timer_lag}");
    // Let go of: its next owner reports it.
    *runtime.0.lock().expect("held") = None;
    assert!(
        value("prosody.partition.lag").abs() < f64::EPSILON,
        "a partition let go of reports no lag: its next owner does"
    );
    assert!(value("prosody.partition.paused").abs() < f64::EPSILON);
    drop((held, runtime));
    assert!(
        value("prosody.partition.lag").abs() < f64::EPSILON,
        "a runtime gone reports zero from then on"
    );
}
