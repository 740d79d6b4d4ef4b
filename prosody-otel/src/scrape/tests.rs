//! The encoder against a Prometheus text-format parser: instruments of
//! every kind recorded on a meter provider of the test's own, collected,
//! encoded, parsed back and compared with what was recorded.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    clippy::panic,
    clippy::float_cmp,
    reason = "test code fails loudly and compares floats it wrote"
)]

use super::{ScrapeReader, encode};
use openmetrics_parser::prometheus::parse_prometheus;
use openmetrics_parser::{MetricNumber, PrometheusType, PrometheusValue};
use opentelemetry::metrics::{MeterProvider as _, ObservableGauge};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;

use std::collections::BTreeMap;

/// A provider with a reader of its own (never the process's).
fn provider(resource: &[(&'static str, &'static str)]) -> (SdkMeterProvider, ScrapeReader) {
    let reader = ScrapeReader::new();
    let provider = SdkMeterProvider::builder()
        .with_reader(reader.clone())
        .with_resource(
            Resource::builder_empty()
                .with_attributes(resource.iter().map(|&(k, v)| KeyValue::new(k, v)))
                .build(),
        )
        .build();
    (provider, reader)
}

/// A series' labels, by name.
type Labels = BTreeMap<String, String>;

/// One parsed family.
#[derive(Debug)]
struct Family {
    kind: PrometheusType,
    help: String,
    series: BTreeMap<Labels, PrometheusValue>,
}

/// The text parsed back, by family name; the parser rejects a family
/// written twice, a series written twice and non-cumulative buckets.
fn parse(text: &str) -> BTreeMap<String, Family> {
    let exposition = parse_prometheus(text).unwrap_or_else(|e| panic!("{e:?} in\n{text}"));
    exposition
        .families
        .into_values()
        .map(|family| {
            let series = family
                .iter_samples()
                .map(|sample| {
                    let labels = sample
                        .get_labelset()
                        .unwrap()
                        .iter()
                        .map(|(name, value)| (name.clone(), value.clone()))
                        .collect();
                    (labels, sample.value.clone())
                })
                .collect();
            let parsed = Family {
                kind: family.family_type.clone(),
                help: family.help.clone(),
                series,
            };
            (family.family_name.clone(), parsed)
        })
        .collect()
}

fn scrape(reader: &ScrapeReader) -> String {
    encode(&reader.collect_now().unwrap())
}

/// The labels of a series of the scope `test` (version `1.2`) with the
/// given attributes.
fn labels(attributes: &[(&str, &str)]) -> Labels {
    attributes
        .iter()
        .map(|&(k, v)| (k.to_owned(), v.to_owned()))
        .chain([
            ("otel_scope_name".to_owned(), "test".to_owned()),
            ("otel_scope_version".to_owned(), "1.2".to_owned()),
        ])
        .collect()
}

fn number(value: &PrometheusValue) -> f64 {
    match value {
        PrometheusValue::Gauge(n) | PrometheusValue::Unknown(n) => n.as_f64(),
        PrometheusValue::Counter(c) => c.value.as_f64(),
        other => panic!("not a single value: {other:?}"),
    }
}

/// The one series of `family` with `labels`.
fn value<'a>(
    families: &'a BTreeMap<String, Family>,
    family: &str,
    labels: &Labels,
) -> &'a PrometheusValue {
    let family = families
        .get(family)
        .unwrap_or_else(|| panic!("no family {family} in {:?}", families.keys()));
    family
        .series
        .get(labels)
        .unwrap_or_else(|| panic!("no series {labels:?} in {:?}", family.series.keys()))
}

/// One instrument of each kind, recorded, on the scope `test` (version
/// `1.2`); the observable gauge's handle is returned, to live as long as
/// the test.
fn record_every_kind(provider: &SdkMeterProvider) -> ObservableGauge<f64> {
    let meter = provider.meter_with_scope(
        InstrumentationScope::builder("test")
            .with_version("1.2")
            .build(),
    );
    let odd = [
        KeyValue::new("odd.key-1", "a\"b\\c\nd é}"),
        KeyValue::new("1st", "x,y=z"),
    ];

    let handled = meter
        .u64_counter("records.handled")
        .with_unit("{record}")
        .with_description("Records handled,\nby \\ topic")
        .build();
    handled.add(3, &odd);
    handled.add(
        4,
        &[
            KeyValue::new("odd.key-1", "other"),
            KeyValue::new("1st", "x,y=z"),
        ],
    );
    meter
        .f64_counter("handler.busy")
        .with_unit("s")
        .build()
        .add(1.5, &[]);
    let depth = meter
        .i64_up_down_counter("queue.depth")
        .with_unit("{record}")
        .build();
    depth.add(3, &[]);
    depth.add(-5, &[]);
    meter
        .u64_gauge("memory.used")
        .with_unit("By")
        .build()
        .record(1024, &[]);
    meter
        .f64_gauge("cache.fill")
        .with_unit("1")
        .build()
        .record(0.25, &[]);
    let lag = meter
        .f64_observable_gauge("consumer.lag")
        .with_unit("s")
        .with_callback(|observer| observer.observe(2.5, &[KeyValue::new("topic", "t")]))
        .build();
    let duration = meter
        .f64_histogram("handler.duration")
        .with_unit("s")
        .with_boundaries(vec![0.1, 1.0, 10.0])
        .build();
    for v in [0.05, 0.5, 0.5, 5.0, 50.0] {
        duration.record(v, &[KeyValue::new("topic", "t")]);
    }
    meter
        .u64_histogram("payload.size")
        .with_unit("By")
        .with_boundaries(vec![100.0, 1000.0])
        .build()
        .record(5000, &[]);

    lag
}

#[test]
fn every_instrument_kind_reads_back_with_its_type_labels_and_values() {
    let (provider, reader) = provider(&[("service.name", "svc.a"), ("host-name", "h\"1")]);
    let _lag = record_every_kind(&provider);
    let text = scrape(&reader);
    let families = parse(&text);
    let names: Vec<&str> = families.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "cache_fill_ratio",
            "consumer_lag_seconds",
            "handler_busy_seconds_total",
            "handler_duration_seconds",
            "memory_used_bytes",
            "payload_size_bytes",
            "queue_depth",
            "records_handled_total",
            "target_info",
        ],
        "{text}"
    );
    let kind = |name: &str| families[name].kind.clone();
    assert_eq!(kind("records_handled_total"), PrometheusType::Counter);
    assert_eq!(kind("handler_busy_seconds_total"), PrometheusType::Counter);
    assert_eq!(kind("queue_depth"), PrometheusType::Gauge);
    assert_eq!(kind("memory_used_bytes"), PrometheusType::Gauge);
    assert_eq!(kind("cache_fill_ratio"), PrometheusType::Gauge);
    assert_eq!(kind("consumer_lag_seconds"), PrometheusType::Gauge);
    assert_eq!(kind("handler_duration_seconds"), PrometheusType::Histogram);
    assert_eq!(kind("target_info"), PrometheusType::Gauge);
    assert_eq!(
        families["records_handled_total"].help,
        "Records handled,\nby \\ topic"
    );

    // Label names sanitized, values escaped and read back as recorded.
    let odd_labels = labels(&[("odd_key_1", "a\"b\\c\nd é}"), ("key_1st", "x,y=z")]);
    assert_eq!(
        number(value(&families, "records_handled_total", &odd_labels)),
        3.0
    );
    let other = labels(&[("odd_key_1", "other"), ("key_1st", "x,y=z")]);
    assert_eq!(
        number(value(&families, "records_handled_total", &other)),
        4.0
    );
    assert_eq!(
        number(value(&families, "handler_busy_seconds_total", &labels(&[]))),
        1.5
    );
    assert_eq!(number(value(&families, "queue_depth", &labels(&[]))), -2.0);
    assert_eq!(
        number(value(&families, "memory_used_bytes", &labels(&[]))),
        1024.0
    );
    assert_eq!(
        number(value(&families, "cache_fill_ratio", &labels(&[]))),
        0.25
    );
    let topic = labels(&[("topic", "t")]);
    assert_eq!(
        number(value(&families, "consumer_lag_seconds", &topic)),
        2.5
    );

    // Buckets cumulative, up to +Inf; the sum and count.
    let PrometheusValue::Histogram(histogram) =
        value(&families, "handler_duration_seconds", &topic)
    else {
        panic!("not a histogram");
    };
    let buckets: Vec<(f64, f64)> = histogram
        .buckets
        .iter()
        .map(|b| (b.upper_bound, b.count.as_f64()))
        .collect();
    assert_eq!(
        buckets,
        [(0.1, 1.0), (1.0, 3.0), (10.0, 4.0), (f64::INFINITY, 5.0)],
        "{text}"
    );
    assert_eq!(histogram.count, Some(5));
    assert_eq!(
        histogram.sum.map(|s| s.as_f64()),
        Some(0.05 + 0.5 + 0.5 + 5.0 + 50.0)
    );
    let PrometheusValue::Histogram(size) = value(&families, "payload_size_bytes", &labels(&[]))
    else {
        panic!("not a histogram");
    };
    let counts: Vec<f64> = size.buckets.iter().map(|b| b.count.as_f64()).collect();
    assert_eq!(counts, [0.0, 0.0, 1.0]);
    assert_eq!(size.sum, Some(MetricNumber::Int(5000)));

    // The resource, as target_info 1.
    let target: Labels = [("service_name", "svc.a"), ("host_name", "h\"1")]
        .iter()
        .map(|&(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert_eq!(number(value(&families, "target_info", &target)), 1.0);
}

#[test]
fn scrapes_are_sorted_and_repeat_exactly() {
    let (provider, reader) = provider(&[("service.name", "svc")]);
    let meter = provider.meter("test");
    let counter = meter.u64_counter("zeta").build();
    let gauge = meter.i64_gauge("alpha").build();
    for key in ["m", "b", "z", "a"] {
        counter.add(1, &[KeyValue::new("key", key)]);
        gauge.record(1, &[KeyValue::new("key", key)]);
    }
    let text = scrape(&reader);
    assert_eq!(
        text,
        scrape(&reader),
        "two scrapes of unchanged instruments"
    );
    let names: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|line| line.split(' ').next().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "target_info", "zeta_total"], "{text}");
    let keys: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("zeta_total{"))
        .map(|line| &line[line.find("key=").unwrap() + 5..][..1])
        .collect();
    assert_eq!(keys, ["a", "b", "m", "z"], "{text}");
}

#[test]
fn one_name_from_two_scopes_is_one_family() {
    let (provider, reader) = provider(&[]);
    for scope in ["b", "a"] {
        provider
            .meter_with_scope(InstrumentationScope::builder(scope).build())
            .u64_counter("jobs")
            .with_description(format!("jobs of {scope}"))
            .build()
            .add(if scope == "a" { 1 } else { 2 }, &[]);
    }
    // The same family name with another type: left out, not written twice.
    provider
        .meter_with_scope(InstrumentationScope::builder("z").build())
        .u64_gauge("jobs_total")
        .build()
        .record(9, &[]);
    let text = scrape(&reader);
    assert_eq!(text.matches("# TYPE jobs_total").count(), 1, "{text}");
    let families = parse(&text);
    assert_eq!(
        families.keys().collect::<Vec<_>>(),
        ["jobs_total"],
        "{text}"
    );
    let jobs = &families["jobs_total"];
    assert_eq!(jobs.kind, PrometheusType::Counter);
    assert_eq!(jobs.help, "jobs of a");
    let scoped = |scope: &str| -> Labels {
        [("otel_scope_name", scope), ("otel_scope_version", "")]
            .iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    };
    assert_eq!(jobs.series.len(), 2, "{text}");
    assert_eq!(number(value(&families, "jobs_total", &scoped("a"))), 1.0);
    assert_eq!(number(value(&families, "jobs_total", &scoped("b"))), 2.0);
}

#[test]
fn a_histogram_attribute_named_le_is_left_to_the_buckets() {
    let (provider, reader) = provider(&[]);
    provider
        .meter("test")
        .u64_histogram("h")
        .with_boundaries(vec![1.0])
        .build()
        .record(1, &[KeyValue::new("le", "x"), KeyValue::new("k", "v")]);
    let text = scrape(&reader);
    let families = parse(&text);
    let labels: Labels = [
        ("k", "v"),
        ("otel_scope_name", "test"),
        ("otel_scope_version", ""),
    ]
    .iter()
    .map(|&(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert!(
        matches!(
            value(&families, "h", &labels),
            PrometheusValue::Histogram(_)
        ),
        "{text}"
    );
}

#[test]
fn names_and_units_map_by_the_compatibility_rules() {
    let (provider, reader) = provider(&[]);
    let meter = provider.meter("test");
    let counter = |name: &'static str, unit: &'static str| {
        meter
            .f64_counter(name)
            .with_unit(unit)
            .build()
            .add(1.0, &[]);
    };
    let gauge = |name: &'static str, unit: &'static str| {
        meter
            .f64_gauge(name)
            .with_unit(unit)
            .build()
            .record(1.0, &[]);
    };
    let up_down = |name: &'static str, unit: &'static str| {
        meter
            .f64_up_down_counter(name)
            .with_unit(unit)
            .build()
            .add(1.0, &[]);
    };
    counter("c.ms", "ms");
    counter("c.ratio", "1");
    counter("c.rate", "By/s");
    counter("c.done_total", "");
    counter("c.seconds", "s");
    counter("c.per", "{record}/s");
    counter("c..odd-name/x", "");
    gauge("g.fill", "1");
    gauge("g.ratio", "1");
    gauge("g.unknown", "wid-gets");
    gauge("g.mem", "MiBy");
    up_down("u.ratio", "1");
    let names: Vec<String> = parse(&scrape(&reader)).into_keys().collect();
    assert_eq!(
        names,
        [
            "c_done_total",
            "c_ms_milliseconds_total",
            "c_odd_name_x_total",
            "c_per_per_second_total",
            "c_rate_bytes_per_second_total",
            "c_ratio_total",
            "c_seconds_total",
            "g_fill_ratio",
            "g_mem_mebibytes",
            "g_ratio",
            "g_unknown_widgets",
            "u_ratio",
        ]
    );
}

mod values;
