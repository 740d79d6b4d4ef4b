//! A scan of a collection, read in chunks as Python iterates.

use crate::convert::item;
use crate::errors;
use prosody_bind::{OpError, Scanned, Sink};
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::{Mutex, mpsc};

/// Elements a scan reads ahead of the iteration, at most.
const AHEAD: usize = 128;

/// The receiving end of a scan running on the engine's runtime; dropping
/// it stops the scan.
#[pyclass(module = "prosody._prosody", frozen)]
pub(crate) struct NativeScan(Arc<Mutex<mpsc::Receiver<Result<Scanned, OpError>>>>);

impl NativeScan {
    /// Starts `scan` (given its sink) on the engine's runtime.
    pub(crate) fn start<F>(scan: impl FnOnce(Sink) -> F) -> PyResult<Self>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (sink, receiver) = mpsc::channel(AHEAD);
        crate::engine()?.spawn(scan(sink));
        Ok(Self(Arc::new(Mutex::new(receiver))))
    }
}

/// A chunk of a scan, converted once the GIL is held; `None` at the end.
struct Chunk(Option<Vec<Scanned>>);

impl<'py> IntoPyObject<'py> for Chunk {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let Some(elements) = self.0 else {
            return Ok(py.None().into_bound(py));
        };
        let list = PyList::empty(py);
        for element in elements {
            match element {
                Scanned::Item(value) => list.append(item(py, value)?)?,
                Scanned::Key(key) => list.append(key)?,
                Scanned::Entry(key, value) => list.append((key, item(py, value)?))?,
            }
        }
        Ok(list.into_any())
    }
}

#[pymethods]
impl NativeScan {
    /// The next elements read (at least one), or `None` at the end.
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let receiver = Arc::clone(&self.0);
        crate::awaitable::awaitable(py, async move {
            let mut receiver = receiver.lock().await;
            let mut chunk = Vec::new();
            if receiver.recv_many(&mut chunk, AHEAD).await == 0 {
                return Ok(Chunk(None));
            }
            let mut elements = Vec::with_capacity(chunk.len());
            for element in chunk {
                elements.push(element.map_err(errors::op)?);
            }
            Ok(Chunk(Some(elements)))
        })
    }
}
