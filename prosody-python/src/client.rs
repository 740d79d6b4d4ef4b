//! The client, seen from Python.

use crate::context::{Collections, Returned};
use crate::convert::{items, to_json, to_py};
use crate::errors;
use crate::handler::{Inbox, PyHandler};
use crate::scan::NativeScan;
use prosody::ProsodyClient;
use prosody_bind::{Answer, Collection, Handler, Op, Reader, answers};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A client of the engine, shared by the Python `ProsodyClient`.
#[pyclass(module = "prosody._prosody", frozen)]
pub(crate) struct NativeClient {
    client: Arc<ProsodyClient>,
    collections: Collections,
}

/// The options as JSON, each by name.
fn options(config: &Bound<'_, PyDict>) -> PyResult<Map<String, Value>> {
    let mut options = Map::new();
    for (name, value) in config.iter() {
        let name: String = name.extract()?;
        let value = to_json(&value).map_err(|error| {
            PyValueError::new_err(format!("option `{name}`: {}", error.value(value.py())))
        })?;
        options.insert(name, value);
    }
    Ok(options)
}

/// The collections of `state_collections`, by name.
fn collections(options: &Map<String, Value>) -> PyResult<Collections> {
    let mut found = HashMap::new();
    if let Some(Value::Array(specs)) = options.get("state_collections") {
        for spec in specs {
            let collection = Collection::from_json(spec).map_err(|reason| {
                PyValueError::new_err(format!("option `state_collections`: {reason}"))
            })?;
            found.insert(collection.spec().name.to_owned(), Arc::new(collection));
        }
    }
    Ok(Arc::new(found))
}

fn seconds(timeout: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(timeout).map_err(|_| {
        PyValueError::new_err(format!(
            "timeout {timeout} is not a non-negative number of seconds"
        ))
    })
}

fn names(subsystems: &[String]) -> Vec<&str> {
    subsystems.iter().map(String::as_str).collect()
}

/// The answers as `{subsystem: (kind, value or message)}`.
struct Answers(Vec<(String, Answer)>);

impl<'py> IntoPyObject<'py> for Answers {
    type Target = PyDict;
    type Output = Bound<'py, PyDict>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (subsystem, answer) in self.0 {
            let kind = answer.kind();
            let value = match answer {
                Answer::Success(value) => to_py(py, &value)?,
                Answer::HandlerError(message)
                | Answer::Timeout(message)
                | Answer::FormatMismatch(message)
                | Answer::MalformedResponse(message) => message.into_pyobject(py)?.into_any(),
            };
            dict.set_item(subsystem, (kind, value))?;
        }
        Ok(dict)
    }
}

#[pymethods]
impl NativeClient {
    /// Builds a client from options by name (the one option table).
    #[staticmethod]
    fn create<'py>(py: Python<'py>, config: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyAny>> {
        crate::telemetry::install()?;
        let options = options(config)?;
        let collections = collections(&options)?;
        let builder = ProsodyClient::builder()
            .options(&options)
            .map_err(errors::config)?;
        crate::awaitable::awaitable(py, async move {
            let client = builder.build().await.map_err(errors::config)?;
            Ok(NativeClient {
                client: Arc::new(client),
                collections,
            })
        })
    }

    #[getter]
    fn source_system(&self) -> String {
        self.client.source_system().to_owned()
    }

    fn send<'py>(
        &self,
        py: Python<'py>,
        topic: String,
        key: String,
        payload: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let payload = to_json(payload)?;
        let client = Arc::clone(&self.client);
        crate::awaitable::awaitable(py, async move {
            client
                .send(&topic, key, &payload)
                .await
                .map_err(errors::client)
        })
    }

    fn excise<'py>(
        &self,
        py: Python<'py>,
        topic: String,
        key: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let client = Arc::clone(&self.client);
        crate::awaitable::awaitable(py, async move {
            client.excise(&topic, key).await.map_err(errors::client)
        })
    }

    #[pyo3(signature = (topic, key, payload, subsystems, timeout))]
    fn request<'py>(
        &self,
        py: Python<'py>,
        topic: String,
        key: String,
        payload: &Bound<'py, PyAny>,
        subsystems: Vec<String>,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let payload = to_json(payload)?;
        let timeout = seconds(timeout)?;
        let client = Arc::clone(&self.client);
        crate::awaitable::awaitable(py, async move {
            let outcomes = client
                .request::<Value>(&topic, key, &payload, &names(&subsystems), timeout)
                .await
                .map_err(errors::client)?;
            Ok(Answers(answers(outcomes)))
        })
    }

    #[pyo3(signature = (topic, key, subsystems, timeout))]
    fn request_excise<'py>(
        &self,
        py: Python<'py>,
        topic: String,
        key: String,
        subsystems: Vec<String>,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let timeout = seconds(timeout)?;
        let client = Arc::clone(&self.client);
        crate::awaitable::awaitable(py, async move {
            let outcomes = client
                .request_excise::<Value>(&topic, key, &names(&subsystems), timeout)
                .await
                .map_err(errors::client)?;
            Ok(Answers(answers(outcomes)))
        })
    }

    /// Starts consuming with a Python handler: returns the inbox of its
    /// calls, which the package's dispatcher drains on the event loop.
    /// Returns once the consumer runs.
    fn subscribe(&self, py: Python<'_>) -> PyResult<Inbox> {
        let inbox = Inbox::new(self.collections.clone())
            .map_err(|error| errors::runtime(format!("the handler's inbox: {error}")))?;
        self.consume(py, Handler::new(PyHandler::new(&inbox)))?;
        Ok(inbox)
    }

    /// For the benchmark: consumes with a Rust handler that does nothing
    /// but count its calls, through the same stack as `subscribe`.
    fn subscribe_noop(&self, py: Python<'_>) -> PyResult<Calls> {
        let calls = Calls::default();
        self.consume(py, Handler::new(calls.clone()))?;
        Ok(calls)
    }

    /// Runs to its end even if the awaitable is cancelled (a drain cut
    /// short would leave settled records uncommitted).
    fn unsubscribe<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = Arc::clone(&self.client);
        let stopping = crate::engine()?.spawn(async move { client.unsubscribe().await });
        crate::awaitable::awaitable(py, async move {
            stopping
                .await
                .map_err(errors::runtime)?
                .map_err(errors::client)
        })
    }

    /// Runs to its end even if the awaitable is cancelled.
    fn shutdown<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = Arc::clone(&self.client);
        let stopping = crate::engine()?.spawn(async move { client.shutdown().await });
        crate::awaitable::awaitable(py, async move { stopping.await.map_err(errors::runtime) })
    }

    fn consumer_state(&self) -> String {
        self.client.consumer_state().to_string()
    }

    fn assigned_partition_count(&self) -> usize {
        self.client.assigned_partition_count()
    }

    fn is_stalled(&self) -> bool {
        self.client.is_stalled()
    }

    /// Opens the reader of `subsystem`'s published `collection`.
    fn published<'py>(
        &self,
        py: Python<'py>,
        subsystem: String,
        collection: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let collection =
            Collection::from_json(&to_json(collection)?).map_err(PyValueError::new_err)?;
        let client = Arc::clone(&self.client);
        crate::awaitable::awaitable(py, async move {
            let reader = Reader::open(&client, &subsystem, &collection)
                .await
                .map_err(errors::op)?;
            Ok(NativeReader(Arc::new(reader)))
        })
    }
}

impl NativeClient {
    /// Starts consuming with `handler` on the engine's runtime, without
    /// the GIL; returns once the consumer runs.
    fn consume(&self, py: Python<'_>, handler: Handler) -> PyResult<()> {
        let runtime = crate::engine()?;
        py.detach(|| runtime.block_on(self.client.subscribe(handler)))
            .map_err(errors::client)
    }
}

/// The calls a no-op Rust handler has had.
#[pyclass(module = "prosody._prosody", frozen)]
#[derive(Clone, Default)]
pub(crate) struct Calls(Arc<AtomicU64>);

#[pymethods]
impl Calls {
    fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Calls {
    fn called(&self) -> futures_util::future::BoxFuture<'static, prosody_bind::HandlerReply> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(Ok(Value::Null)))
    }
}

impl prosody_bind::JsonHandler for Calls {
    fn on_message(
        &self,
        _: prosody::Context,
        _: prosody::Message<Value>,
    ) -> futures_util::future::BoxFuture<'static, prosody_bind::HandlerReply> {
        self.called()
    }

    fn on_timer(
        &self,
        _: prosody::Context,
        _: prosody::Timer,
    ) -> futures_util::future::BoxFuture<'static, prosody_bind::HandlerReply> {
        self.called()
    }

    fn on_excise(
        &self,
        _: prosody::Context,
        _: prosody::Excise,
    ) -> futures_util::future::BoxFuture<'static, prosody_bind::HandlerReply> {
        self.called()
    }
}

/// A reader of a published collection.
#[pyclass(module = "prosody._prosody", frozen)]
pub(crate) struct NativeReader(Arc<Reader>);

#[pymethods]
impl NativeReader {
    /// Scans `key`'s collection (`items`, `keys`, `values`), in chunks.
    fn scan(&self, op: String, key: String, args: &Bound<'_, PyTuple>) -> PyResult<NativeScan> {
        let args = items(args)?;
        let reader = Arc::clone(&self.0);
        NativeScan::start(move |sink| async move {
            Op::new(op, args).scan_published(&reader, &key, &sink).await;
        })
    }

    /// Runs the read `op` on `key`'s collection.
    fn call<'py>(
        &self,
        py: Python<'py>,
        op: String,
        key: String,
        args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = items(args)?;
        let reader = Arc::clone(&self.0);
        crate::awaitable::awaitable(py, async move {
            let reply = reader
                .read(&key, Op::new(op, args))
                .await
                .map_err(errors::op)?;
            Ok(Returned(reply))
        })
    }
}
