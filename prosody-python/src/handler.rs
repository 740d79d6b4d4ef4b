//! A Python handler as the engine's: each call is a task on the
//! application's event loop, and the engine awaits its completion
//! without holding the GIL.

use crate::context::{Collections, NativeContext};
use crate::convert::{to_json, to_py};
use prosody::{Context, Excise, HandlerError, Message, Timer};
use prosody_bind::{HandlerReply, JsonHandler, failure};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::Value;
use std::sync::{Mutex, PoisonError};
use tokio::sync::oneshot;

/// The package's dispatcher (`prosody.handler`) over the application's
/// handler and event loop: its `message`, `excise` and `timer` schedule a
/// task on the loop and return at once.
pub(crate) struct PyHandler {
    dispatch: Py<PyAny>,
    event_loop: Py<PyAny>,
    collections: Collections,
}

impl PyHandler {
    pub(crate) fn new(
        dispatch: Py<PyAny>,
        event_loop: Py<PyAny>,
        collections: Collections,
    ) -> Self {
        Self {
            dispatch,
            event_loop,
            collections,
        }
    }

    fn context(&self, context: Context) -> NativeContext {
        NativeContext::new(context, self.collections.clone())
    }

    /// Starts one call (`start` hands the dispatcher its arguments) and
    /// returns the future of its completion.
    fn call(
        &self,
        start: impl FnOnce(
            Python<'_>,
            &Py<PyAny>,
            Py<Completion>,
            Option<Bound<'_, PyDict>>,
        ) -> PyResult<()>,
    ) -> futures_util::future::BoxFuture<'static, HandlerReply> {
        let (sender, receiver) = oneshot::channel();
        let started = Python::attach(|py| -> PyResult<Call> {
            let done = Py::new(py, Completion::new(sender))?;
            start(py, &self.dispatch, done.clone_ref(py), trace(py)?)?;
            Ok(Call {
                done: Some(done),
                event_loop: self.event_loop.clone_ref(py),
            })
        });
        Box::pin(async move {
            let mut call = match started {
                Ok(call) => call,
                Err(error) => return Err(python_failure(&error)),
            };
            let reply = receiver.await;
            call.done = None;
            reply.unwrap_or_else(|_| {
                Err(failure(
                    "CancelledError",
                    "the handler call ended without completing",
                    false,
                ))
            })
        })
    }
}

/// The engine span's `traceparent`, for the handler's OpenTelemetry
/// context.
fn trace(py: Python<'_>) -> PyResult<Option<Bound<'_, PyDict>>> {
    let Some(parent) = prosody::trace::current() else {
        return Ok(None);
    };
    let carrier = PyDict::new(py);
    carrier.set_item(intern!(py, "traceparent"), parent)?;
    Ok(Some(carrier))
}

/// A Python error raised while starting a call, as a transient failure.
fn python_failure(error: &PyErr) -> HandlerError {
    Python::attach(|py| {
        let type_name = error
            .get_type(py)
            .qualname()
            .map_or_else(|_| "Exception".to_owned(), |name| name.to_string());
        failure(type_name, error.value(py).to_string(), false)
    })
}

fn epoch_seconds(millis: i64) -> f64 {
    #[allow(
        clippy::cast_precision_loss,
        reason = "milliseconds since 1970 fit a double exactly"
    )]
    let seconds = millis as f64 / 1000.0;
    seconds
}

impl JsonHandler for PyHandler {
    fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> futures_util::future::BoxFuture<'static, HandlerReply> {
        self.call(|py, dispatch, done, trace| {
            let args = (
                self.context(context),
                message.topic.to_string(),
                message.partition,
                message.offset,
                epoch_seconds(message.timestamp.as_millis()),
                message.key.to_string(),
                to_py(py, &message.payload)?,
                NativeMessage(message),
                trace,
                done,
            );
            dispatch
                .call_method1(py, intern!(py, "message"), args)
                .map(drop)
        })
    }

    fn on_timer(
        &self,
        context: Context,
        timer: Timer,
    ) -> futures_util::future::BoxFuture<'static, HandlerReply> {
        self.call(|py, dispatch, done, trace| {
            let args = (
                self.context(context),
                timer.key.to_string(),
                epoch_seconds(timer.time.as_millis()),
                trace,
                done,
            );
            dispatch
                .call_method1(py, intern!(py, "timer"), args)
                .map(drop)
        })
    }

    fn on_excise(
        &self,
        context: Context,
        excise: Excise,
    ) -> futures_util::future::BoxFuture<'static, HandlerReply> {
        self.call(|py, dispatch, done, trace| {
            let args = (
                self.context(context),
                excise.topic.to_string(),
                excise.partition,
                excise.offset,
                epoch_seconds(excise.timestamp.as_millis()),
                excise.key.to_string(),
                trace,
                done,
            );
            dispatch
                .call_method1(py, intern!(py, "excise"), args)
                .map(drop)
        })
    }
}

/// One call in flight: dropped before it completes (a timeout, a
/// rebalance, shutdown), it cancels the Python task.
struct Call {
    done: Option<Py<Completion>>,
    event_loop: Py<PyAny>,
}

impl Drop for Call {
    fn drop(&mut self) {
        let Some(done) = self.done.take() else {
            return;
        };
        Python::attach(|py| {
            let task = {
                let mut state = done.get().lock();
                if state.sender.is_none() {
                    return;
                }
                state.cancelled = true;
                state.task.take()
            };
            if let Some(task) = task {
                let cancel = task.getattr(py, intern!(py, "cancel"));
                let scheduled = cancel.and_then(|cancel| {
                    self.event_loop
                        .call_method1(py, intern!(py, "call_soon_threadsafe"), (cancel,))
                });
                if let Err(error) = scheduled {
                    tracing::debug!(%error, "the event loop refused to cancel a handler task; it is closed");
                }
            }
        });
    }
}

struct CompletionState {
    sender: Option<oneshot::Sender<HandlerReply>>,
    task: Option<Py<PyAny>>,
    cancelled: bool,
}

/// How the dispatcher reports one call's end.
///
/// Invariant: it reports at most once; after the engine gave the call up
/// (`cancelled`), `bind` refuses the task, so the handler does not run.
#[pyclass(module = "prosody._prosody", frozen)]
pub(crate) struct Completion {
    state: Mutex<CompletionState>,
}

impl Completion {
    fn new(sender: oneshot::Sender<HandlerReply>) -> Self {
        Self {
            state: Mutex::new(CompletionState {
                sender: Some(sender),
                task: None,
                cancelled: false,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CompletionState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn send(&self, reply: HandlerReply) {
        let sender = {
            let mut state = self.lock();
            state.task = None;
            state.sender.take()
        };
        if let Some(sender) = sender {
            // The engine may have given the call up: then nobody listens.
            let _ = sender.send(reply);
        }
    }
}

#[pymethods]
impl Completion {
    /// Records the task running the call; `False` when the engine already
    /// gave the call up (the task must not run).
    fn bind(&self, task: Py<PyAny>) -> bool {
        let mut state = self.lock();
        if state.cancelled || state.sender.is_none() {
            return false;
        }
        state.task = Some(task);
        true
    }

    /// The handler returned `value` (its answer to a request).
    fn ok(&self, value: &Bound<'_, PyAny>) {
        let reply = to_json(value).map_err(|error| {
            failure(
                "TypeError",
                format!("the handler's return value has no JSON representation: {error}"),
                true,
            )
        });
        self.send(reply);
    }

    /// The handler raised an exception of type `type_name`.
    fn fail(&self, type_name: String, message: String, permanent: bool) {
        self.send(Err(failure(type_name, message, permanent)));
    }
}

/// A message a handler received, kept for the message collections.
#[pyclass(module = "prosody._prosody", frozen)]
pub(crate) struct NativeMessage(pub(crate) Message<Value>);
