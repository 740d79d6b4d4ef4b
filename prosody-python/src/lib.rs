//! The native module of the Python package `prosody`: the engine, its
//! client, handler calls on the application's event loop, keyed state and
//! published readers. What is Python's (the handler base class, the
//! dataclasses, the error classes and decorators) is in the package.

mod admin;
mod awaitable;
mod bell;
mod client;
mod context;
mod convert;
mod errors;
mod handler;
mod scan;
mod telemetry;

use pyo3::prelude::*;
use std::sync::OnceLock;
use tokio::runtime::Runtime;

/// The runtime of the engine's tasks (consumers, stages, timers, answers,
/// and the futures behind Python's awaitables). Invariant: its threads
/// never take the GIL (calls and outcomes reach the event loop through a
/// queue and a socket), so a handler that holds the GIL does not slow the
/// engine, and the interpreter can exit while they run.
pub(crate) fn engine() -> PyResult<&'static Runtime> {
    static ENGINE: OnceLock<Result<Runtime, String>> = OnceLock::new();
    let engine = ENGINE.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .thread_name("prosody-engine")
            .enable_all()
            .build()
            .map_err(|error| error.to_string())
    });
    engine.as_ref().map_err(|error| {
        pyo3::exceptions::PyRuntimeError::new_err(format!(
            "the engine's runtime could not start: {error}"
        ))
    })
}

/// The module `prosody._prosody`.
#[pymodule]
fn _prosody(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<client::NativeClient>()?;
    module.add_class::<client::NativeReader>()?;
    module.add_class::<client::Calls>()?;
    module.add_class::<context::NativeContext>()?;
    module.add_class::<handler::Completion>()?;
    module.add_class::<handler::Inbox>()?;
    module.add_class::<scan::NativeScan>()?;
    module.add_class::<convert::NativeMessage>()?;
    module.add_class::<admin::NativeAdmin>()?;
    module.add_function(wrap_pyfunction!(telemetry::flush_telemetry, module)?)?;
    module.add_function(wrap_pyfunction!(telemetry::shutdown_telemetry, module)?)?;
    Ok(())
}
