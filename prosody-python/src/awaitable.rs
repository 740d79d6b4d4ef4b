//! Rust futures as Python awaitables, completed on the event loop.
//!
//! Invariant: the engine's threads never take the GIL. A future runs on
//! the engine's runtime; its outcome is queued for the loop that awaits
//! it and a byte written to a socket the loop watches
//! (`loop.add_reader`), the way handler calls reach the loop. The loop's
//! own thread converts the outcome and completes the awaitable. So no
//! thread of ours runs Python code, or holds Python objects mid-call,
//! while the interpreter exits: a thread of ours caught inside Python
//! when the interpreter finalizes is unwound without the GIL, and the
//! unwinding frees Python objects beside the collector (a crash at exit).

use crate::bell::Bell;
use futures_util::FutureExt as _;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::{IntoPyObjectExt as _, intern};
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::task::AbortHandle;

/// Converts an outcome to Python, on the loop's thread.
type Outcome = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// An awaitable's outcome, waiting for its loop.
struct Settled {
    future: Py<PyAny>,
    outcome: Outcome,
}

struct Queue {
    settled: Vec<Settled>,
    /// A byte is on its way to the loop for the outcomes queued.
    armed: bool,
}

/// The outcomes waiting for one event loop, and the socket that wakes it.
struct Board {
    queue: Mutex<Queue>,
    bell: Bell,
}

impl Board {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues an outcome and wakes the loop if no wake-up is on its way;
    /// takes no GIL.
    fn push(&self, settled: Settled) {
        let wake = {
            let mut queue = self.lock();
            queue.settled.push(settled);
            !std::mem::replace(&mut queue.armed, true)
        };
        if wake {
            self.bell.ring();
        }
    }
}

/// The completer of one event loop's awaitables (made on first use,
/// watched by the loop for as long as it lives; dropped, with what it
/// still holds, when a later loop finds this one closed).
#[pyclass(module = "prosody._prosody", frozen)]
pub(crate) struct Settler(Arc<Board>);

#[pymethods]
impl Settler {
    /// Completes every awaitable whose outcome is queued (on the loop);
    /// one that was cancelled meanwhile is left as it is.
    fn settle(&self, py: Python<'_>) {
        let settled = {
            let mut queue = self.0.lock();
            queue.armed = false;
            self.0.bell.hush();
            std::mem::take(&mut queue.settled)
        };
        for Settled { future, outcome } in settled {
            let future = future.bind(py);
            // One awaitable that cannot be completed as it should still
            // ends (with a `RuntimeError`), and the rest of the batch too.
            let failure = match catch_unwind(AssertUnwindSafe(|| complete(py, future, outcome))) {
                Ok(Ok(())) => continue,
                Ok(Err(error)) => error.to_string(),
                Err(_) => "converting its outcome panicked".to_owned(),
            };
            tracing::warn!(%failure, "an awaitable could not be completed as it should");
            let error =
                PyRuntimeError::new_err(format!("the awaitable could not be completed: {failure}"));
            let ended = future
                .call_method0(intern!(py, "done"))
                .and_then(|done| done.is_truthy());
            if matches!(ended, Ok(false)) {
                let _ = future.call_method1(intern!(py, "set_exception"), (error.into_value(py),));
            }
        }
    }
}

impl Settler {
    /// Drops the outcomes queued for a loop that will never settle them
    /// (it closed): they hold its futures, and through them the loop.
    fn abandon(&self) {
        drop(std::mem::take(&mut self.0.lock().settled));
    }
}

fn complete(py: Python<'_>, future: &Bound<'_, PyAny>, outcome: Outcome) -> PyResult<()> {
    if future.call_method0(intern!(py, "done"))?.is_truthy()? {
        return Ok(());
    }
    match outcome(py) {
        Ok(value) => future.call_method1(intern!(py, "set_result"), (value,))?,
        Err(error) => future.call_method1(intern!(py, "set_exception"), (error.into_value(py),))?,
    };
    Ok(())
}

/// Aborts the Rust future of an awaitable cancelled in Python (a done
/// callback; it does nothing for an awaitable that completed).
#[pyclass(module = "prosody._prosody", frozen)]
pub(crate) struct Abort(AbortHandle);

#[pymethods]
impl Abort {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        if future
            .call_method0(intern!(future.py(), "cancelled"))?
            .is_truthy()?
        {
            self.0.abort();
        }
        Ok(())
    }
}

/// The settler of `event_loop`, made and watched on first use.
fn settler<'py>(event_loop: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Settler>> {
    static SETTLERS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let py = event_loop.py();
    // Weak keys: a loop that is gone takes its settler (and socket) along.
    let settlers = SETTLERS
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(
                py.import("weakref")?
                    .getattr("WeakKeyDictionary")?
                    .call0()?
                    .unbind(),
            )
        })?
        .bind(py);
    if let Ok(found) = settlers
        .call_method1(intern!(py, "get"), (event_loop,))?
        .cast_into::<Settler>()
    {
        return Ok(found);
    }
    // A new loop: the settlers of closed ones go first. An outcome queued
    // after its loop closed holds a future of that loop, which would keep
    // the loop (its key here) alive, and its socket open, for good.
    let entries = settlers
        .call_method0(intern!(py, "items"))?
        .try_iter()?
        .map(|entry| entry?.extract())
        .collect::<PyResult<Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)>>>()?;
    for (other, settler) in entries {
        if other.call_method0(intern!(py, "is_closed"))?.is_truthy()? {
            if let Ok(settler) = settler.cast_into::<Settler>() {
                settler.get().abandon();
            }
            settlers.del_item(&other)?;
        }
    }
    let bell = Bell::new()?;
    let fd = bell.fileno();
    let made = Bound::new(
        py,
        Settler(Arc::new(Board {
            queue: Mutex::new(Queue {
                settled: Vec::new(),
                armed: false,
            }),
            bell,
        })),
    )?;
    // Watched from an empty context, not the first caller's.
    py.import("contextvars")?
        .getattr("Context")?
        .call0()?
        .call_method1(
            intern!(py, "run"),
            (
                event_loop.getattr(intern!(py, "add_reader"))?,
                fd,
                made.getattr(intern!(py, "settle"))?,
            ),
        )?;
    settlers.set_item(event_loop, &made)?;
    Ok(made)
}

/// `future` as an awaitable of the running event loop: it runs on the
/// engine's runtime, and its output (or error, or a panic as
/// `RuntimeError`) completes the awaitable on the loop. Cancelling the
/// awaitable drops the future.
pub(crate) fn awaitable<'py, F, T>(py: Python<'py>, future: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let runtime = crate::engine()?;
    let event_loop = py
        .import("asyncio")?
        .call_method0(intern!(py, "get_running_loop"))?;
    let board = Arc::clone(&settler(&event_loop)?.get().0);
    let awaited = event_loop.call_method0(intern!(py, "create_future"))?;
    let handle = awaited.clone().unbind();
    let task = runtime.spawn(async move {
        let output = AssertUnwindSafe(future).catch_unwind().await;
        let outcome: Outcome = Box::new(move |py| match output {
            Ok(Ok(value)) => value.into_py_any(py),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(PyRuntimeError::new_err(
                "the engine's future for this awaitable panicked",
            )),
        });
        board.push(Settled {
            future: handle,
            outcome,
        });
    });
    awaited.call_method1(
        intern!(py, "add_done_callback"),
        (Abort(task.abort_handle()),),
    )?;
    Ok(awaited)
}
