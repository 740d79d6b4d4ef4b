//! The metrics a client records, read back through an in-memory exporter.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code fails loudly"
)]

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use prosody::MemoryStores;
use prosody::metrics::{Metered, Metrics};
use prosody_conformance::broker::Failure;
use prosody_conformance::store::stores as conformance;
use std::collections::BTreeMap;

/// Each store operation's count and error count, by operation.
fn store_operations(
    provider: &SdkMeterProvider,
    exporter: &InMemoryMetricExporter,
) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    provider.force_flush().expect("flush");
    let batches = exporter.get_finished_metrics().expect("metrics");
    let (mut durations, mut errors) = (BTreeMap::new(), BTreeMap::new());
    for scope in batches.last().expect("a batch").scope_metrics() {
        for metric in scope.metrics() {
            fn operation<'a>(
                mut attributes: impl Iterator<Item = &'a opentelemetry::KeyValue>,
            ) -> String {
                attributes
                    .find(|kv| kv.key.as_str() == "prosody.store.operation")
                    .map(|kv| kv.value.to_string())
                    .expect("an operation")
            }
            match (metric.name(), metric.data()) {
                (
                    "prosody.store.operation.duration",
                    AggregatedMetrics::F64(MetricData::Histogram(histogram)),
                ) => {
                    for point in histogram.data_points() {
                        durations.insert(operation(point.attributes()), point.count());
                    }
                }
                (
                    "prosody.store.operation.errors",
                    AggregatedMetrics::U64(MetricData::Sum(sum)),
                ) => {
                    for point in sum.data_points() {
                        errors.insert(operation(point.attributes()), point.value());
                    }
                }
                _ => {}
            }
        }
    }
    (durations, errors)
}

/// Measured stores keep the store contract (the whole shared suite passes
/// through them), and each operation that waits is counted once.
#[tokio::test(start_paused = true)]
async fn measured_stores_keep_the_contract_and_count_each_operation() -> Result<(), Failure> {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let metrics = Metrics::new(&provider.meter("test"), "memory", "group");
    let stores = Metered::new(MemoryStores::new(), &metrics);
    let other = Metered::new(MemoryStores::new(), &metrics);
    conformance::a_commit_lands_whole(&stores).await?;
    conformance::run_all(&stores, &other).await?;
    let (durations, errors) = store_operations(&provider, &exporter);
    let operations = [
        "cell",
        "cells",
        "commit",
        "contains",
        "deferred",
        "identify",
        "load",
        "open",
        "scheduled",
    ];
    // Every operation has its series (bound when the stores are made),
    // under its own name, and none failed.
    assert_eq!(
        durations.keys().map(String::as_str).collect::<Vec<_>>(),
        operations,
        "{durations:?}"
    );
    assert_eq!(errors.len(), operations.len(), "{errors:?}");
    assert!(
        errors.values().all(|&n| n == 0),
        "the memory stores never fail: {errors:?}"
    );
    for waited in ["commit", "deferred", "scheduled", "load", "contains"] {
        assert!(durations[waited] > 0, "{waited} measured: {durations:?}");
    }
    Ok(())
}
