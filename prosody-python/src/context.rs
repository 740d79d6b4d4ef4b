//! The handler's context, seen from Python.

use crate::convert::{item, items, seconds, timestamp};
use crate::errors;
use crate::scan::NativeScan;
use prosody::Context;
use prosody::state::{Kind, Payload};
use prosody_bind::{Collection, Item, Op, Reply};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::collections::HashMap;
use std::sync::Arc;

/// The registered keyed-state collections, by name.
pub(crate) type Collections = Arc<HashMap<String, Arc<Collection>>>;

/// One handler call's context: timers, cancellation and keyed state of
/// the current key.
#[pyclass(module = "prosody._prosody", frozen)]
pub(crate) struct NativeContext {
    context: Context,
    collections: Collections,
}

impl NativeContext {
    pub(crate) fn new(context: Context, collections: Collections) -> Self {
        Self {
            context,
            collections,
        }
    }

    fn collection(&self, name: &str) -> PyResult<Arc<Collection>> {
        self.collections.get(name).cloned().ok_or_else(|| {
            errors::PermanentStateError::new_err(format!(
                "state collection {name} is not registered in state_collections"
            ))
        })
    }
}

fn timers(error: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(format!("timers: {error}"))
}

#[pymethods]
impl NativeContext {
    fn schedule(&self, at: f64) -> PyResult<()> {
        self.context.schedule(timestamp(at)?).map_err(timers)
    }

    fn clear_and_schedule(&self, at: f64) -> PyResult<()> {
        self.context
            .clear_and_schedule(timestamp(at)?)
            .map_err(timers)
    }

    fn unschedule(&self, at: f64) -> PyResult<()> {
        self.context.unschedule(timestamp(at)?).map_err(timers)
    }

    fn clear_scheduled(&self) -> PyResult<()> {
        self.context.clear_scheduled().map_err(timers)
    }

    fn scheduled<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let context = self.context.clone();
        crate::awaitable::awaitable(py, async move {
            let times = context.scheduled().await.map_err(timers)?;
            Ok(times.into_iter().map(seconds).collect::<Vec<f64>>())
        })
    }

    fn should_cancel(&self) -> bool {
        self.context.should_cancel()
    }

    fn on_cancel<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let cancelled = self.context.on_cancel();
        crate::awaitable::awaitable(py, async move {
            cancelled.await;
            Ok(())
        })
    }

    /// Checks that `name` is registered with this kind (`value`, `map`,
    /// `deque`) and payload (`json`, `message`): a `PermanentStateError`
    /// otherwise, before any operation runs.
    fn check(&self, name: &str, kind: &str, payload: &str) -> PyResult<()> {
        let spec = self.collection(name)?.spec();
        let registered = (
            match spec.kind {
                Kind::Value => "value",
                Kind::Map => "map",
                Kind::Deque => "deque",
            },
            match spec.payload {
                Payload::Json => "json",
                Payload::Message => "message",
            },
        );
        if registered == (kind, payload) {
            return Ok(());
        }
        Err(errors::PermanentStateError::new_err(format!(
            "state collection {name} is registered as a {} of {} items, not a {kind} of {payload} items",
            registered.0, registered.1
        )))
    }

    /// Scans the current key's collection `name` (`items`, `keys`,
    /// `values`), in chunks.
    fn scan(&self, name: &str, op: String, args: &Bound<'_, PyTuple>) -> PyResult<NativeScan> {
        let collection = self.collection(name)?;
        let args = items(args)?;
        let context = self.context.clone();
        NativeScan::start(move |sink| async move {
            Op::new(op, args).scan(&context, &collection, &sink).await;
        })
    }

    /// Runs `op` on the current key's collection `name`.
    fn state<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        op: String,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let collection = self.collection(name)?;
        let args = items(args)?;
        let context = self.context.clone();
        crate::awaitable::awaitable(py, async move {
            let reply = Op::new(op, args)
                .run(&context, &collection)
                .await
                .map_err(errors::op)?;
            Ok(Returned(reply))
        })
    }
}

/// An operation's reply, converted once the GIL is held.
pub(crate) struct Returned(pub(crate) Reply);

fn optional(py: Python<'_>, found: Option<Item>) -> PyResult<Bound<'_, PyAny>> {
    match found {
        Some(found) => item(py, found),
        None => Ok(py.None().into_bound(py)),
    }
}

impl<'py> IntoPyObject<'py> for Returned {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self.0 {
            Reply::Unit => py.None().into_bound(py),
            Reply::Bool(flag) => flag.into_pyobject(py)?.to_owned().into_any(),
            Reply::Count(count) => count.into_pyobject(py)?.into_any(),
            Reply::Item(found) => optional(py, found)?,
            Reply::Items(found) => {
                let list = PyList::empty(py);
                for one in found {
                    list.append(optional(py, one)?)?;
                }
                list.into_any()
            }
        })
    }
}
