//! A Python handler as the engine's.
//!
//! The engine never takes the GIL to start or stop a call: it queues the
//! call in an [`Inbox`] and, when the inbox was empty, writes one byte to
//! a socket the event loop watches (`loop.add_reader`). On the loop, the
//! package's dispatcher takes the whole batch at once and starts a task
//! for each call; the task reports through its [`Completion`]. A call the
//! engine gives up (a timeout, a rebalance, shutdown) queues a
//! cancellation the same way. So a loop that is blocked only delays its
//! calls (the probes see a stall); it never blocks the engine.

use crate::bell::Bell;
use crate::context::{Collections, NativeContext};
use crate::convert::{NativeMessage, seconds, to_json, to_py};
use prosody::{Context, Excise, Message, Timer};
use prosody_bind::{HandlerReply, JsonHandler, failure};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use serde_json::Value;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::oneshot;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a call handles.
enum Event {
    Message(Message<Value>),
    Timer(Timer),
    Excise(Excise),
}

/// One call waiting for the loop.
struct Pending {
    event: Event,
    context: Context,
    trace: Option<String>,
    call: Arc<CallState>,
}

#[allow(
    clippy::large_enum_variant,
    reason = "calls are the common entry; boxing each would cost an allocation per call"
)]
enum Entry {
    Call(Pending),
    Cancel(Arc<CallState>),
}

/// One call's end, shared by the engine's future and the Python task.
///
/// Invariant: it reports at most once; once the engine gave the call up
/// (`cancelled`), `bind` refuses the task, so a call not yet started never
/// runs.
struct CallState {
    inner: Mutex<CallInner>,
}

struct CallInner {
    sender: Option<oneshot::Sender<HandlerReply>>,
    task: Option<Py<PyAny>>,
    cancelled: bool,
}

impl CallState {
    /// Whether the engine gave the call up before it started.
    fn given_up(&self) -> bool {
        lock(&self.inner).cancelled
    }

    fn send(&self, reply: HandlerReply) {
        let sender = {
            let mut inner = lock(&self.inner);
            inner.task = None;
            inner.sender.take()
        };
        if let Some(sender) = sender {
            // The engine may have given the call up: then nobody listens.
            let _ = sender.send(reply);
        }
    }
}

struct Queue {
    entries: Vec<Entry>,
    /// A byte is on its way to the loop for the entries queued.
    armed: bool,
    /// The dispatcher stopped watching: calls fail at once.
    closed: bool,
}

/// The calls waiting for the event loop, and the socket that wakes it.
struct Shared {
    queue: Mutex<Queue>,
    collections: Collections,
    bell: Bell,
}

impl Shared {
    fn push(&self, entry: Entry) {
        let wake = {
            let mut queue = lock(&self.queue);
            if queue.closed {
                drop(queue);
                if let Entry::Call(pending) = entry {
                    pending.call.send(Err(ended()));
                }
                return;
            }
            queue.entries.push(entry);
            !std::mem::replace(&mut queue.armed, true)
        };
        if wake {
            self.bell.ring();
        }
    }
}

/// The calls of one subscription, for the loop's dispatcher.
#[pyclass(module = "prosody._prosody", frozen)]
pub(crate) struct Inbox(Arc<Shared>);

impl Inbox {
    pub(crate) fn new(collections: Collections) -> std::io::Result<Self> {
        Ok(Self(Arc::new(Shared {
            queue: Mutex::new(Queue {
                entries: Vec::new(),
                armed: false,
                closed: false,
            }),
            collections,
            bell: Bell::new()?,
        })))
    }
}

/// The failure of a call whose subscription's dispatcher stopped before
/// the call started: transient, so another attempt (or owner) handles it.
fn ended() -> prosody::HandlerError {
    failure(
        "CancelledError",
        "the subscription's event loop stopped watching its calls",
        false,
    )
}

#[pymethods]
impl Inbox {
    /// Stops the inbox: the calls queued fail (transiently: another
    /// attempt handles them), the cancellations queued are carried out,
    /// and calls queued later fail at once.
    fn close(&self, py: Python<'_>) {
        let entries = {
            let mut queue = lock(&self.0.queue);
            queue.closed = true;
            std::mem::take(&mut queue.entries)
        };
        for entry in entries {
            match entry {
                Entry::Call(pending) => pending.call.send(Err(ended())),
                Entry::Cancel(state) => cancel(py, &state),
            }
        }
    }

    /// The socket the loop watches for readability.
    fn fileno(&self) -> i32 {
        self.0.bell.fileno()
    }

    /// Every call queued since the last take, as tuples
    /// (`("message", context, topic, partition, offset, timestamp, key,
    /// payload, native, trace, done)`, `("excise", context, topic,
    /// partition, offset, timestamp, key, trace, done)`, `("timer",
    /// context, key, time, trace, done)`); cancellations queued are
    /// carried out here (on the loop).
    fn take<'py>(&self, py: Python<'py>) -> Bound<'py, PyList> {
        let collections = &self.0.collections;
        let entries = {
            let mut queue = lock(&self.0.queue);
            queue.armed = false;
            self.0.bell.hush();
            std::mem::take(&mut queue.entries)
        };
        let calls = PyList::empty(py);
        for entry in entries {
            match entry {
                Entry::Call(pending) => {
                    if pending.call.given_up() {
                        continue;
                    }
                    // A call that cannot be handed over fails alone; the
                    // rest of the batch still starts.
                    let state = Arc::clone(&pending.call);
                    match call(py, pending, collections).and_then(|tuple| calls.append(tuple)) {
                        Ok(()) => {}
                        Err(error) => state.send(Err(failure(
                            "TypeError",
                            format!("the call could not be handed to Python: {error}"),
                            true,
                        ))),
                    }
                }
                Entry::Cancel(state) => cancel(py, &state),
            }
        }
        calls
    }
}

/// Cancels the task of a call the engine gave up, if it has one (on the
/// loop's thread).
fn cancel(py: Python<'_>, state: &CallState) {
    let task = lock(&state.inner).task.take();
    if let Some(task) = task
        && let Err(error) = task.call_method0(py, intern!(py, "cancel"))
    {
        tracing::warn!(%error, "a handler task refused to be cancelled");
    }
}

/// One call as the tuple the dispatcher reads.
fn call<'py>(
    py: Python<'py>,
    pending: Pending,
    collections: &Collections,
) -> PyResult<Bound<'py, PyTuple>> {
    let Pending {
        event,
        context,
        trace,
        call,
    } = pending;
    let context = NativeContext::new(context, collections.clone());
    let trace = match trace {
        Some(parent) => {
            let carrier = PyDict::new(py);
            carrier.set_item(intern!(py, "traceparent"), parent)?;
            carrier.into_any()
        }
        None => py.None().into_bound(py),
    };
    let done = Completion(call);
    match event {
        Event::Message(message) => {
            let payload = to_py(py, &message.payload)?;
            let args = (
                intern!(py, "message"),
                context,
                message.topic.to_string(),
                message.partition,
                message.offset,
                seconds(message.timestamp),
                message.key.to_string(),
                payload,
                NativeMessage(message),
                trace,
                done,
            );
            args.into_pyobject(py)
        }
        Event::Excise(excise) => (
            intern!(py, "excise"),
            context,
            excise.topic.to_string(),
            excise.partition,
            excise.offset,
            seconds(excise.timestamp),
            excise.key.to_string(),
            trace,
            done,
        )
            .into_pyobject(py),
        Event::Timer(timer) => (
            intern!(py, "timer"),
            context,
            timer.key.to_string(),
            seconds(timer.time),
            trace,
            done,
        )
            .into_pyobject(py),
    }
}

/// The engine's side of a Python handler: calls go to the inbox.
pub(crate) struct PyHandler(Arc<Shared>);

impl PyHandler {
    pub(crate) fn new(inbox: &Inbox) -> Self {
        Self(Arc::clone(&inbox.0))
    }

    fn call(
        &self,
        event: Event,
        context: Context,
    ) -> futures_util::future::BoxFuture<'static, HandlerReply> {
        let (sender, receiver) = oneshot::channel();
        let state = Arc::new(CallState {
            inner: Mutex::new(CallInner {
                sender: Some(sender),
                task: None,
                cancelled: false,
            }),
        });
        self.0.push(Entry::Call(Pending {
            event,
            context,
            trace: prosody::trace::current(),
            call: Arc::clone(&state),
        }));
        let guard = Call {
            state: Some(state),
            inbox: Arc::clone(&self.0),
        };
        Box::pin(async move {
            let mut guard = guard;
            let reply = receiver.await;
            guard.state = None;
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

impl JsonHandler for PyHandler {
    fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> futures_util::future::BoxFuture<'static, HandlerReply> {
        self.call(Event::Message(message), context)
    }

    fn on_timer(
        &self,
        context: Context,
        timer: Timer,
    ) -> futures_util::future::BoxFuture<'static, HandlerReply> {
        self.call(Event::Timer(timer), context)
    }

    fn on_excise(
        &self,
        context: Context,
        excise: Excise,
    ) -> futures_util::future::BoxFuture<'static, HandlerReply> {
        self.call(Event::Excise(excise), context)
    }
}

/// One call in flight: dropped before it completes, it queues the
/// cancellation of its task.
struct Call {
    state: Option<Arc<CallState>>,
    inbox: Arc<Shared>,
}

impl Drop for Call {
    fn drop(&mut self) {
        let Some(state) = self.state.take() else {
            return;
        };
        let started = {
            let mut inner = lock(&state.inner);
            if inner.sender.is_none() {
                return;
            }
            inner.cancelled = true;
            inner.sender = None;
            inner.task.is_some()
        };
        if started {
            self.inbox.push(Entry::Cancel(state));
        }
    }
}

/// How the dispatcher reports one call's end.
#[pyclass(module = "prosody._prosody", frozen)]
pub(crate) struct Completion(Arc<CallState>);

#[pymethods]
impl Completion {
    /// Records the task running the call; `False` when the engine already
    /// gave the call up (the task must not run).
    fn bind(&self, task: Py<PyAny>) -> bool {
        let mut inner = lock(&self.0.inner);
        if inner.cancelled || inner.sender.is_none() {
            return false;
        }
        inner.task = Some(task);
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
        self.0.send(reply);
    }

    /// The handler raised an exception of type `type_name`.
    fn fail(&self, type_name: String, message: String, permanent: bool) {
        self.0.send(Err(failure(type_name, message, permanent)));
    }
}

impl Drop for Completion {
    /// A completion dropped without a report (its task cancelled before
    /// it started, or never started) fails its call transiently, so the
    /// engine does not wait for its timeout.
    fn drop(&mut self) {
        self.0.send(Err(failure(
            "CancelledError",
            "the handler's task ended without reporting",
            false,
        )));
    }
}
