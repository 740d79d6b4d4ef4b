//! Telemetry export for prosody: spans and metrics over OTLP (gRPC or
//! HTTP, with TLS), the process's providers, the Prometheus text of its
//! metrics ([`scrape`]), the library's log filter (`PROSODY_LOG`) and,
//! with the `sentry` feature, the Sentry reporter of failed handler calls.
//!
//! The facade re-exports it as `prosody::otel` (and `prosody::sentry`)
//! under its default `otel` feature; without that feature the facade
//! builds none of it (no tonic, reqwest or rustls) and records its metrics
//! on the `opentelemetry` globals.
//!
//! [`install`] makes the process's `tracing` subscriber: logs filtered by
//! `PROSODY_LOG` (default `info`) and the OpenTelemetry layer, so spans
//! carry trace context across Kafka and timers and are exported when an
//! OTLP endpoint is set:
//!
//! ```no_run
//! # fn main() -> Result<(), prosody_otel::OtelError> {
//! prosody_otel::install()?;
//! // ... run the service ...
//! prosody_otel::shutdown_telemetry()?;
//! # Ok(())
//! # }
//! ```
//!
//! An application with a subscriber of its own adds [`layer`] to it
//! instead; `PROSODY_LOG` then plays no part:
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt as _;
//! use tracing_subscriber::util::SubscriberInitExt as _;
//!
//! # fn main() -> Result<(), prosody_otel::OtelError> {
//! tracing_subscriber::registry().with(prosody_otel::layer()?).init();
//! # Ok(())
//! # }
//! ```
//!
//! [`meter_provider`] is the process's meter provider: its instruments are
//! read by the process's scrape reader and, when an OTLP endpoint is set,
//! exported.

mod export;
mod failure;
mod log;
mod resource;
pub mod scrape;
#[cfg(feature = "sentry")]
pub mod sentry;
mod signal;
mod tls;

#[cfg(test)]
mod tests;

pub use log::install;

use export::{Meters, Traces};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::Tracer;
use std::sync::{Mutex, PoisonError};
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::registry::LookupSpan;

/// Reads one environment variable: the process's, or a test's map.
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process's tracer provider, made by the first [`layer`] or
/// [`install`] call.
static TRACES: Mutex<Option<Traces>> = Mutex::new(None);

/// The process's meter provider, made by the first [`meter_provider`] call.
static METERS: Mutex<Option<Meters>> = Mutex::new(None);

/// The process's resource, shared by its traces and metrics.
static RESOURCE: Mutex<Option<Resource>> = Mutex::new(None);

/// OpenTelemetry could not be set up, or its export failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// An OTLP protocol variable names no protocol the library speaks.
    #[error("{variable}={value:?} is not an OTLP protocol: use grpc, http/protobuf or http/json")]
    Protocol {
        /// The variable, such as `OTEL_EXPORTER_OTLP_PROTOCOL`.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// A variable's value does not have the form it needs.
    #[error("{variable}={value:?} is not {expected}")]
    Value {
        /// The variable, such as `OTEL_METRIC_EXPORT_INTERVAL`.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What it should be.
        expected: &'static str,
    },
    /// A certificate or key file cannot be read or holds no usable PEM.
    #[error("{variable}={path:?}: {reason}")]
    TlsFile {
        /// The variable, such as `OTEL_EXPORTER_OTLP_CERTIFICATE`.
        variable: &'static str,
        /// The file it names.
        path: String,
        /// What is wrong with the file.
        reason: String,
    },
    /// A client certificate without its key, or a key without its
    /// certificate.
    #[error(
        "{present} is set but {missing} is not: mutual TLS needs the client certificate and its key"
    )]
    ClientIdentity {
        /// The variable that is set.
        present: &'static str,
        /// The variable that is missing.
        missing: &'static str,
    },
    /// The certificates and key given do not make a TLS configuration
    /// (for example, the key does not match the certificate).
    #[error("TLS for OTLP {signal} cannot be set up: {reason}")]
    Tls {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// Why.
        reason: String,
    },
    /// The OTLP exporter could not be built.
    #[error("the OTLP {signal} exporter could not be built: {reason}")]
    Exporter {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// Why.
        reason: String,
    },
    /// `PROSODY_LOG` is not a log filter.
    #[error("{variable}={value:?} is not a log filter: {reason}")]
    Filter {
        /// `PROSODY_LOG`.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What the parser said.
        reason: String,
    },
    /// The process already has a global `tracing` subscriber; [`install`]
    /// never replaces it.
    #[error(
        "a global tracing subscriber is already installed and is kept; add prosody_otel::layer() to it instead"
    )]
    Subscriber,
    /// Flushing or shutting down failed.
    #[error("exporting {signal} failed: {reason}")]
    Export {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// The exporter's error, with its cause (for example
        /// `invalid peer certificate: UnknownIssuer`).
        reason: String,
    },
}

/// A layer for the application's `tracing` subscriber. The first call (of
/// this or [`install`]) makes the process's tracer provider from the
/// environment: spans are exported over OTLP when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is
/// set; without them they carry trace context and are exported nowhere.
///
/// # Errors
///
/// A variable that does not parse, a certificate file that cannot be read,
/// or an exporter that cannot be built.
pub fn layer<S>() -> Result<OpenTelemetryLayer<S, Tracer>, OtelError>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    layer_from(&process_env)
}

/// The process's meter provider, made by the first call from the
/// environment with the same resource as the traces: its instruments are
/// always read by the scrape reader, and exported over OTLP every
/// `OTEL_METRIC_EXPORT_INTERVAL` (60 s) when `OTEL_EXPORTER_OTLP_ENDPOINT`
/// or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is set. Later calls return the
/// same provider.
///
/// # Errors
///
/// As for [`layer`].
pub fn meter_provider() -> Result<SdkMeterProvider, OtelError> {
    let mut slot = lock(&METERS);
    if let Some(meters) = &*slot {
        return Ok(meters.provider.clone());
    }
    let resource = process_resource(&process_env)?;
    let meters = export::meters(&process_env, resource, Some(crate::scrape::reader()))?;
    let provider = meters.provider.clone();
    *slot = Some(meters);
    Ok(provider)
}

/// Exports the spans that have ended and the metrics' current values.
/// Blocks: call it outside async code or in `spawn_blocking`.
///
/// # Errors
///
/// An export failed; the error names its cause.
pub fn flush_telemetry() -> Result<(), OtelError> {
    let traces = lock(&TRACES).as_ref().map_or(Ok(()), Traces::flush);
    let metrics = lock(&METERS).as_ref().map_or(Ok(()), Meters::flush);
    traces.and(metrics)
}

/// Exports what is pending and stops exporting; later spans and
/// measurements go nowhere. Blocks, as [`flush_telemetry`] does.
///
/// # Errors
///
/// An export failed; the error names its cause.
pub fn shutdown_telemetry() -> Result<(), OtelError> {
    let traces = lock(&TRACES).as_ref().map_or(Ok(()), Traces::shutdown);
    let metrics = lock(&METERS).as_ref().map_or(Ok(()), Meters::shutdown);
    traces.and(metrics)
}

/// The layer over the process's tracer provider, made from `env` if it is
/// not made yet.
fn layer_from<S>(env: Env) -> Result<OpenTelemetryLayer<S, Tracer>, OtelError>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let mut slot = lock(&TRACES);
    let provider = if let Some(traces) = &*slot {
        traces.provider.clone()
    } else {
        let traces = export::traces(env, process_resource(env)?)?;
        let provider = traces.provider.clone();
        *slot = Some(traces);
        provider
    };
    Ok(tracing_opentelemetry::layer().with_tracer(provider.tracer("prosody")))
}

/// The process's resource, made from `env` if it is not made yet.
fn process_resource(env: Env) -> Result<Resource, OtelError> {
    let mut slot = lock(&RESOURCE);
    if let Some(resource) = &*slot {
        return Ok(resource.clone());
    }
    let resource = resource::resource(env)?;
    *slot = Some(resource.clone());
    Ok(resource)
}

/// The process's environment.
fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The slot, even if a thread panicked holding it: each slot is written
/// once, whole.
fn lock<T>(slot: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}
