//! Values through the encoder and the parser: floats read back exactly,
//! and arbitrary names, help texts, label values and values round-trip.

use super::{Labels, number, parse, provider, scrape, value};
use openmetrics_parser::{MetricNumber, PrometheusType, PrometheusValue};
use opentelemetry::KeyValue;
use opentelemetry::metrics::MeterProvider as _;
use proptest::prelude::*;

#[test]
fn floats_read_back_exactly() {
    let (provider, reader) = provider(&[]);
    let meter = provider.meter("test");
    let gauge = meter.f64_gauge("g").build();
    let values = [
        0.1,
        -0.0,
        1e300,
        -1.5e-300,
        5e-324,
        f64::MAX,
        123_456_789.125,
        1e21,
        1e-7,
    ];
    for (i, v) in values.iter().enumerate() {
        gauge.record(*v, &[KeyValue::new("i", i.to_string())]);
    }
    // The SDK takes no infinite measurement, but sums overflow to one.
    let up = meter.f64_counter("up").build();
    let down = meter.f64_up_down_counter("down").build();
    for _ in 0..2 {
        up.add(f64::MAX, &[]);
        down.add(-f64::MAX, &[]);
    }
    let text = scrape(&reader);
    let families = parse(&text);
    let scope = |extra: &[(&str, &str)]| -> Labels {
        extra
            .iter()
            .chain(&[("otel_scope_name", "test"), ("otel_scope_version", "")])
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    };
    for (i, v) in values.iter().enumerate() {
        let read = number(value(&families, "g", &scope(&[("i", &i.to_string())])));
        assert!(
            read.to_bits() == v.to_bits() || (*v == 0.0 && read == 0.0),
            "{v} read back as {read} in\n{text}"
        );
    }
    assert_eq!(
        number(value(&families, "up_total", &scope(&[]))),
        f64::INFINITY
    );
    assert_eq!(
        number(value(&families, "down", &scope(&[]))),
        f64::NEG_INFINITY
    );
    assert!(
        text.contains("up_total{otel_scope_name=\"test\",otel_scope_version=\"\"} +Inf\n"),
        "{text}"
    );
    // No measurement makes a NaN; written, it is the format's.
    assert_eq!(crate::scrape::text::float(f64::NAN), "NaN");
}

/// Label values with the characters that need escaping, and any other
/// (but a lone carriage return: the format allows it, the test's parser
/// takes it for a line end).
fn label_value() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::string::string_regex("[\"\\\\\n ,={}a-zé]{0,10}").unwrap(),
        proptest::string::string_regex("[^\r]{0,10}").unwrap(),
    ]
}

/// A finite float of any class: the SDK drops infinities and NaN.
fn finite() -> impl Strategy<Value = f64> {
    use proptest::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any instrument name, help text, label values and values: the text
    /// parses, the family keeps the name's letters and digits in order,
    /// and every value and label value reads back as recorded.
    #[test]
    fn encoded_metrics_round_trip_through_the_parser(
        name in "[a-zA-Z][a-zA-Z0-9_./-]{0,20}",
        help in proptest::string::string_regex("[^\r]{0,20}").unwrap(),
        points in proptest::collection::btree_map(label_value(), finite(), 1..4),
        count in 0..=i64::MAX.cast_unsigned(),
    ) {
        let (provider, reader) = provider(&[("service.name", "svc")]);
        let meter = provider.meter("test");
        let gauge = meter.f64_gauge(name.clone()).with_description(help.clone()).build();
        for (label, v) in &points {
            gauge.record(*v, &[KeyValue::new("label", label.clone())]);
        }
        meter.u64_counter(format!("{name}.count")).build().add(count, &[]);
        let text = scrape(&reader);
        let families = parse(&text);
        prop_assert_eq!(families.len(), 3, "{}", text);

        let letters = |s: &str| s.chars().filter(char::is_ascii_alphanumeric).collect::<String>();
        let (gauge_name, family) = families
            .iter()
            .find(|(n, f)| f.kind == PrometheusType::Gauge && n.as_str() != "target_info")
            .unwrap();
        prop_assert_eq!(letters(gauge_name), letters(&name));
        prop_assert!(!gauge_name.contains("__"));
        prop_assert_eq!(&family.help, &help);
        prop_assert_eq!(family.series.len(), points.len());
        for (label, v) in &points {
            let labels: Labels = [("label", label.as_str()), ("otel_scope_name", "test"), ("otel_scope_version", "")]
                .iter()
                .map(|&(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            let read = family.series.get(&labels).map(number);
            prop_assert!(
                read.is_some_and(|r| r.to_bits() == v.to_bits() || (*v == 0.0 && r == 0.0)),
                "{:?} read back as {:?} in\n{}", v, read, text
            );
        }

        let (_, counter) = families
            .iter()
            .find(|(_, f)| f.kind == PrometheusType::Counter)
            .unwrap();
        let read = counter.series.values().map(|v| match v {
            PrometheusValue::Counter(c) => c.value,
            other => panic!("{other:?}"),
        }).collect::<Vec<_>>();
        prop_assert_eq!(read, vec![MetricNumber::Int(count.cast_signed())]);
    }
}
