//! The engine's telemetry: exported without a call from the application
//! when an OTLP endpoint is set, flushed and stopped on request.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::sync::OnceLock;

/// Installs the engine's tracing once per process: log lines filtered by
/// `PROSODY_LOG` and the OpenTelemetry layer, which exports spans when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` (or the traces one) is set. A process
/// whose engine tracing is already installed keeps it.
pub(crate) fn install() -> PyResult<()> {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    let installed = INSTALLED.get_or_init(|| match prosody::otel::install() {
        Ok(()) | Err(prosody::otel::OtelError::Subscriber) => Ok(()),
        Err(error) => Err(error.to_string()),
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
