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

/// Handles every message, and says so.
struct Told(tokio::sync::mpsc::UnboundedSender<String>);

impl prosody::EventHandler for Told {
    type Payload = serde_json::Value;
    type Output = ();

    async fn on_message(
        &self,
        _: prosody::Context,
        message: prosody::Message<serde_json::Value>,
    ) -> Result<(), prosody::HandlerError> {
        let _ = self.0.send(message.key.to_string());
        Ok(())
    }

    async fn on_timer(
        &self,
        _: prosody::Context,
        _: prosody::Timer,
    ) -> Result<(), prosody::HandlerError> {
        Ok(())
    }

    async fn on_excise(
        &self,
        _: prosody::Context,
        _: prosody::Excise,
    ) -> Result<(), prosody::HandlerError> {
        Ok(())
    }
}

/// A meter given to the builder records the client's instruments and its
/// counters: its handler calls, by outcome, reach that meter's reader.
#[tokio::test(start_paused = true)]
async fn a_given_meter_records_the_clients_metrics() {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let client = prosody::ProsodyClient::builder()
        .mock(true)
        .group_id("given-meter")
        .source_system("test")
        .subscribed_topics(["metered"])
        .meter(provider.meter("given"))
        .build()
        .await
        .expect("built");
    let (told, mut handled) = tokio::sync::mpsc::unbounded_channel();
    client.subscribe(Told(told)).await.expect("subscribed");
    client
        .send("metered", "k", &serde_json::json!({"n": 1}))
        .await
        .expect("sent");
    let key = tokio::time::timeout(std::time::Duration::from_secs(60), handled.recv())
        .await
        .expect("handled in time");
    assert_eq!(key.as_deref(), Some("k"));
    client.shutdown().await;
    provider.force_flush().expect("flush");
    let batches = exporter.get_finished_metrics().expect("metrics");
    let names: std::collections::BTreeSet<String> = batches
        .iter()
        .flat_map(opentelemetry_sdk::metrics::data::ResourceMetrics::scope_metrics)
        .flat_map(opentelemetry_sdk::metrics::data::ScopeMetrics::metrics)
        .map(|metric| metric.name().to_owned())
        .collect();
    for name in ["messaging.process.duration", "prosody.telemetry.dropped"] {
        assert!(names.contains(name), "{name} not recorded: {names:?}");
    }
}
