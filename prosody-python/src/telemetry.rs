//! The engine's telemetry: exported without a call from the application
//! when an OTLP endpoint is set, flushed and stopped on request.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::io::IsTerminal as _;
use std::sync::OnceLock;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// Installs the engine's tracing once per process: log lines on standard
/// output filtered by `PROSODY_LOG` (default `info`), and the OpenTelemetry
/// layer at `info`, apart from that filter, which exports spans when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces one) is set. A process
/// that already has a global subscriber keeps it.
pub(crate) fn install() -> PyResult<()> {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    let installed = INSTALLED.get_or_init(|| {
        if tracing::dispatcher::has_been_set() {
            return Ok(());
        }
        let variable = std::env::var("PROSODY_LOG").ok();
        let text = variable
            .as_deref()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or("info");
        let logs = EnvFilter::try_new(text)
            .map_err(|error| format!("PROSODY_LOG={text:?} is not a log filter: {error}"))?;
        let spans = prosody::otel::layer().map_err(|error| error.to_string())?;
        let subscriber = tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::stdout().is_terminal())
                    .with_filter(logs),
            )
            .with(spans.with_filter(LevelFilter::INFO));
        // Another subscriber set meanwhile is kept.
        let _ = tracing::subscriber::set_global_default(subscriber);
        Ok(())
    });
    installed.clone().map_err(PyValueError::new_err)
}

/// Exports the spans that ended and the metrics' current values.
#[pyfunction]
pub(crate) fn flush_telemetry(py: Python<'_>) -> PyResult<()> {
    py.detach(prosody::otel::flush_telemetry)
        .map_err(crate::errors::runtime)
}

/// Exports what is pending and stops exporting.
#[pyfunction]
pub(crate) fn shutdown_telemetry(py: Python<'_>) -> PyResult<()> {
    py.detach(prosody::otel::shutdown_telemetry)
        .map_err(crate::errors::runtime)
}
