//! OpenTelemetry: a `tracing` layer that makes the library's spans (and the
//! application's) OpenTelemetry spans, so trace context crosses Kafka and
//! timers, exported over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt as _;
//! use tracing_subscriber::util::SubscriberInitExt as _;
//!
//! # fn main() -> Result<(), prosody::otel::OtelError> {
//! tracing_subscriber::registry().with(prosody::otel::layer()?).init();
//! // ... run the service ...
//! prosody::otel::shutdown_telemetry()?;
//! # Ok(())
//! # }
//! ```

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::trace::{SdkTracerProvider, Tracer};
use std::sync::OnceLock;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::registry::LookupSpan;

/// The process's tracer provider, made by the first [`layer`] call.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// OpenTelemetry could not be set up, or its export failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` names a protocol this build lacks.
    #[error(
        "environment variable OTEL_EXPORTER_OTLP_PROTOCOL={0:?} is not supported: use http/protobuf or http/json"
    )]
    Protocol(String),
    /// The endpoint is `https`: this build has no TLS for OTLP. Export to a
    /// collector over plain HTTP (a local agent or sidecar).
    #[error(
        "{0}={1:?} needs TLS, which this build's OTLP exporter lacks; use an http:// collector"
    )]
    Tls(&'static str, String),
    /// The OTLP exporter could not be built.
    #[error("the OTLP span exporter could not be built: {0}")]
    Exporter(String),
    /// Flushing or shutting down failed.
    #[error("exporting spans failed: {0}")]
    Export(String),
}

/// A layer for the application's `tracing` subscriber. The first call
/// makes the process's tracer provider from the environment: spans are
/// exported over OTLP (`OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf`, the
/// default, or `http/json`) when `OTEL_EXPORTER_OTLP_ENDPOINT` is set;
/// without it they carry trace context and are exported nowhere.
///
/// # Errors
///
/// An unsupported protocol, or an exporter that cannot be built.
pub fn layer<S>() -> Result<OpenTelemetryLayer<S, Tracer>, OtelError>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let provider = if let Some(provider) = PROVIDER.get() {
        provider.clone()
    } else {
        let made = provider(&|name| std::env::var(name).ok())?;
        PROVIDER.get_or_init(|| made).clone()
    };
    Ok(tracing_opentelemetry::layer().with_tracer(provider.tracer("prosody")))
}

/// The process's meter provider, made on first use: its instruments are
/// read by the probe server's `/metrics`.
///
/// # Errors
///
/// None yet: the OTLP metric export is configured here next.
pub fn meter_provider() -> Result<opentelemetry_sdk::metrics::SdkMeterProvider, OtelError> {
    static METERS: OnceLock<opentelemetry_sdk::metrics::SdkMeterProvider> = OnceLock::new();
    Ok(METERS
        .get_or_init(|| {
            opentelemetry_sdk::metrics::SdkMeterProvider::builder()
                .with_reader(crate::scrape::reader())
                .build()
        })
        .clone())
}

/// Exports the spans that have ended and not yet gone.
///
/// # Errors
///
/// The exporter failed.
pub fn flush_telemetry() -> Result<(), OtelError> {
    PROVIDER
        .get()
        .map_or(Ok(()), SdkTracerProvider::force_flush)
        .map_err(|e| OtelError::Export(e.to_string()))
}

/// Exports what is pending and stops exporting; later spans go nowhere.
///
/// # Errors
///
/// The exporter failed.
pub fn shutdown_telemetry() -> Result<(), OtelError> {
    PROVIDER
        .get()
        .map_or(Ok(()), SdkTracerProvider::shutdown)
        .map_err(|e| OtelError::Export(e.to_string()))
}

/// The provider the environment asks for.
fn provider(env: &dyn Fn(&str) -> Option<String>) -> Result<SdkTracerProvider, OtelError> {
    let builder = SdkTracerProvider::builder();
    let endpoints = [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ];
    let endpoint = endpoints.into_iter().find_map(|variable| {
        env(variable)
            .filter(|e| !e.trim().is_empty())
            .map(|e| (variable, e))
    });
    let Some((variable, endpoint)) = endpoint else {
        return Ok(builder.build());
    };
    if endpoint.trim().to_ascii_lowercase().starts_with("https:") {
        return Err(OtelError::Tls(variable, endpoint));
    }
    let protocol = match env("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref().map(str::trim) {
        None | Some("http/protobuf") => Protocol::HttpBinary,
        Some("http/json") => Protocol::HttpJson,
        Some(other) => return Err(OtelError::Protocol(other.to_owned())),
    };
    // The exporter reads the endpoint (and the traces path) itself.
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()
        .map_err(|e| OtelError::Exporter(e.to_string()))?;
    Ok(builder.with_batch_exporter(exporter).build())
}

#[cfg(test)]
mod tests {
    use super::{OtelError, provider};

    #[test]
    fn the_environment_chooses_the_export() {
        fn env(pairs: Vec<(&'static str, &'static str)>) -> impl Fn(&str) -> Option<String> {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| (*value).to_owned())
            }
        }
        assert!(
            provider(&env(vec![])).is_ok(),
            "no endpoint: nothing to fail"
        );
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318");
        assert!(provider(&env(vec![endpoint])).is_ok());
        let json = ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
        assert!(provider(&env(vec![endpoint, json])).is_ok());
        let tls = (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "https://collector:4318",
        );
        let error = provider(&env(vec![tls])).err().map(|e| e.to_string());
        assert!(error.is_some_and(|e| e.contains("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")));
        let grpc = ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
        let error = provider(&env(vec![endpoint, grpc])).err();
        assert!(matches!(&error, Some(OtelError::Protocol(p)) if p == "grpc"));
        let shown = error.map(|e| e.to_string()).unwrap_or_default();
        assert!(shown.contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{shown}");
    }
}
