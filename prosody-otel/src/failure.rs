//! What a signal's failed export failed with. The SDK's errors lose the
//! cause (an HTTP export says only "network error", a metric flush only
//! "Failed to flush"), so the HTTP client and the metric exporter keep it
//! for the flush that asks.

use super::signal::Signal;
use super::{OtelError, lock};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::MetricExporter;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The cause of a signal's last failed export.
#[derive(Clone, Debug, Default)]
pub(super) struct Failure(Arc<Mutex<Option<String>>>);

impl Failure {
    pub(super) fn clear(&self) {
        lock(&self.0).take();
    }

    /// Keeps the first cause since the last clear: the transport's, which
    /// says most.
    fn record(&self, cause: String) {
        lock(&self.0).get_or_insert(cause);
    }

    pub(super) fn error(&self, signal: Signal, error: &dyn std::fmt::Display) -> OtelError {
        let reason = match lock(&self.0).take() {
            Some(cause) => format!("{error}: {cause}"),
            None => error.to_string(),
        };
        OtelError::Export {
            signal: signal.name(),
            reason,
        }
    }
}

/// An error with its causes, each once.
pub(super) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The blocking HTTP client, keeping the cause of each failed request.
#[derive(Debug)]
pub(super) struct Recording {
    pub(super) client: reqwest::blocking::Client,
    pub(super) failure: Failure,
}

#[async_trait::async_trait]
impl HttpClient for Recording {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        HttpClient::send_bytes(&self.client, request)
            .await
            .inspect_err(|error| self.failure.record(chain(error.as_ref())))
    }
}

/// A metric exporter keeping the cause of each failed export.
#[derive(Debug)]
pub(super) struct Recorded {
    pub(super) exporter: MetricExporter,
    pub(super) failure: Failure,
}

impl PushMetricExporter for Recorded {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        self.exporter
            .export(metrics)
            .await
            .inspect_err(|error| self.failure.record(error.to_string()))
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.exporter.temporality()
    }
}
