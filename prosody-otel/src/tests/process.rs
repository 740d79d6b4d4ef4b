//! The process's own providers and subscriber: one each, whatever the
//! number of calls.

use super::Vars;
use crate::{OtelError, log};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use std::sync::{Arc, Mutex};

#[test]
fn the_process_meter_provider_is_one_and_read_by_the_scrape_reader() {
    let first = crate::meter_provider().unwrap();
    let second = crate::meter_provider().unwrap();
    let add = |provider: &opentelemetry_sdk::metrics::SdkMeterProvider, n| {
        provider
            .meter("prosody-test")
            .u64_counter("prosody.test.scraped")
            .build()
            .add(n, &[]);
    };
    add(&first, 2);
    add(&second, 5);
    let scraped = crate::scrape::reader().collect_now().unwrap();
    let total: u64 = scraped
        .scope_metrics()
        .flat_map(opentelemetry_sdk::metrics::data::ScopeMetrics::metrics)
        .filter(|metric| metric.name() == "prosody.test.scraped")
        .map(|metric| match metric.data() {
            AggregatedMetrics::U64(MetricData::Sum(sum)) => sum
                .data_points()
                .map(opentelemetry_sdk::metrics::data::SumDataPoint::value)
                .sum::<u64>(),
            other => panic!("not a sum: {other:?}"),
        })
        .sum();
    assert_eq!(total, 7, "both calls give the provider the reader collects");
}

#[test]
fn install_sets_the_global_subscriber_once_filtered_by_prosody_log() {
    let logs = Arc::new(Mutex::new(Vec::<u8>::new()));
    let writer = {
        let logs = Arc::clone(&logs);
        move || Sink(Arc::clone(&logs))
    };
    let vars = Vars::default().with("PROSODY_LOG", "warn");
    log::install_from(&|name| vars.get(name), writer.clone(), false).unwrap();
    tracing::info!("prosody-install-test: quiet");
    tracing::warn!("prosody-install-test: loud");
    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(text.contains("prosody-install-test: loud"), "{text}");
    assert!(!text.contains("prosody-install-test: quiet"), "{text}");

    // The subscriber in place is kept.
    let again = log::install_from(&|name| vars.get(name), writer, false);
    assert!(matches!(again, Err(OtelError::Subscriber)), "{again:?}");
}

/// Log lines kept for the test to read.
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
