use super::{COUNTERS, Counts, SERIES, Watched, register};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use prosody_request::Refusal;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A client whose counts are fixed.
struct Fixed([u64; SERIES]);

impl Counts for Fixed {
    fn counts(&self) -> [u64; SERIES] {
        self.0
    }
}

/// Each point of counter `name`: its attributes and its value.
fn points(
    provider: &SdkMeterProvider,
    exporter: &InMemoryMetricExporter,
    name: &str,
) -> Vec<(BTreeMap<String, String>, u64)> {
    provider.force_flush().expect("flush");
    let batches = exporter.get_finished_metrics().expect("metrics");
    let mut found = Vec::new();
    for scope in batches.last().expect("a batch").scope_metrics() {
        for metric in scope.metrics().filter(|m| m.name() == name) {
            let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() else {
                panic!("{name} is not a u64 counter");
            };
            for point in sum.data_points() {
                let attributes = point
                    .attributes()
                    .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                    .collect();
                found.push((attributes, point.value()));
            }
        }
    }
    found.sort();
    found
}

fn attributes(reason: Option<&str>) -> BTreeMap<String, String> {
    let mut attributes = BTreeMap::from([(
        "messaging.consumer.group.name".to_owned(),
        "shop".to_owned(),
    )]);
    if let Some(reason) = reason {
        attributes.insert("prosody.reason".to_owned(), reason.to_owned());
    }
    attributes
}

/// The published readers' cache and the peer endpoint's refusals are
/// exported as their own counters, summed over a group's clients, the
/// refusals under their reasons.
#[test]
fn the_published_cache_and_the_peer_refusals_are_counted_per_group() {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let watched: Arc<Watched> = Arc::default();
    register(&provider.meter("test"), &watched);
    // Series i of the first client counts i + 1, of the second 100.
    let first: Arc<dyn Counts> = Arc::new(Fixed(std::array::from_fn(|i| {
        u64::try_from(i).expect("small") + 1
    })));
    let second: Arc<dyn Counts> = Arc::new(Fixed([100; SERIES]));
    watched.lock().expect("unpoisoned").extend([
        (Arc::from("shop"), Arc::downgrade(&first)),
        (Arc::from("shop"), Arc::downgrade(&second)),
    ]);

    let series: usize = COUNTERS.iter().map(|c| c.reasons.len().max(1)).sum();
    assert_eq!(series, SERIES);
    let refused = COUNTERS.last().expect("a counter");
    assert_eq!(refused.reasons, Refusal::ALL.map(Refusal::as_str));
    assert_eq!(
        points(&provider, &exporter, "prosody.published.cache.hits"),
        [(attributes(None), 106)]
    );
    assert_eq!(
        points(&provider, &exporter, "prosody.published.cache.misses"),
        [(attributes(None), 107)]
    );
    assert_eq!(
        points(&provider, &exporter, "prosody.peer.refused"),
        [
            (attributes(Some("body_too_large")), 109),
            (attributes(Some("connections")), 108),
            (attributes(Some("malformed")), 110),
            (attributes(Some("slow")), 111),
        ]
    );
    assert_eq!(
        points(&provider, &exporter, "prosody.state.cache.misses"),
        [(attributes(None), 105)]
    );
    drop(first);
    drop(second);
}
