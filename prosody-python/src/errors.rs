//! The engine's errors as Python exceptions.

use prosody::state::StateError;
use prosody::{Category, ClientError, ConfigError};
use prosody_bind::OpError;
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

// The package's own exception classes. An error of theirs is made
// without the GIL (on the engine's threads too) and its class is looked
// up when it is raised, on a Python thread.
pyo3::import_exception!(prosody.errors, NullValueError);
pyo3::import_exception!(prosody.errors, TransientStateError);
pyo3::import_exception!(prosody.errors, PermanentStateError);

/// A configuration error: `TypeError` for a name that is no option,
/// `ValueError` for a value, `ConnectionError` for a server that refused
/// or did not answer.
pub(crate) fn config(error: ConfigError) -> PyErr {
    let message = error.to_string();
    match error {
        ConfigError::Unknown { .. } => PyTypeError::new_err(message),
        ConfigError::Cassandra { .. }
        | ConfigError::Unreachable { .. }
        | ConfigError::StateStore { .. } => PyConnectionError::new_err(message),
        _ => PyValueError::new_err(message),
    }
}

/// A client error: `ValueError` for an invalid request, keyed-state
/// errors as their classes, `RuntimeError` otherwise (closed, not
/// subscribed, a failed send).
pub(crate) fn client(error: ClientError) -> PyErr {
    match error {
        ClientError::InvalidRequest(message) => PyValueError::new_err(message),
        ClientError::State(error) => state(error),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// A keyed-state error as `NullValueError`, `TransientStateError` or
/// `PermanentStateError`, by its category.
pub(crate) fn state(error: StateError) -> PyErr {
    let message = error.to_string();
    if matches!(error, StateError::NullValue { .. }) {
        return NullValueError::new_err(message);
    }
    match error.category() {
        Category::Transient => TransientStateError::new_err(message),
        _ => PermanentStateError::new_err(message),
    }
}

/// A state operation's error: a misuse is a `TypeError`.
pub(crate) fn op(error: OpError) -> PyErr {
    match error {
        OpError::State(error) => state(error),
        OpError::Usage(message) => PyTypeError::new_err(message),
        OpError::Client(error) => client(error),
    }
}

/// A failure the engine reports with only its message.
pub(crate) fn runtime(error: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(error.to_string())
}
