//! The process's scrape reader: the metrics the probe server serves as
//! Prometheus text at `/metrics`, read from the same instruments that the
//! OTLP export reads, and their encoding ([`encode`]).

mod encode;
mod names;
#[cfg(test)]
mod tests;
mod text;

pub use encode::encode;

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, ManualReader, Pipeline, Temporality};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

/// A reader collected on demand; clones share one reader.
///
/// Invariant: registered with at most one meter provider (the process's);
/// collecting before that, or after its shutdown, is an error.
#[derive(Clone, Debug)]
pub struct ScrapeReader(Arc<ManualReader>);

/// The process's scrape reader.
pub fn reader() -> ScrapeReader {
    static READER: OnceLock<ScrapeReader> = OnceLock::new();
    READER.get_or_init(ScrapeReader::new).clone()
}

impl Default for ScrapeReader {
    fn default() -> Self {
        Self::new()
    }
}

impl ScrapeReader {
    /// A reader of its own, registered with no provider yet: the process
    /// has one ([`reader`]); tests make theirs.
    #[must_use]
    pub fn new() -> Self {
        Self(Arc::new(
            ManualReader::builder()
                .with_temporality(Temporality::Cumulative)
                .build(),
        ))
    }

    /// The instruments' values now.
    pub fn collect_now(&self) -> Result<ResourceMetrics, OTelSdkError> {
        let mut metrics = ResourceMetrics::default();
        self.0.collect(&mut metrics)?;
        Ok(metrics)
    }
}

impl MetricReader for ScrapeReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline);
    }

    fn collect(&self, metrics: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(metrics)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}
