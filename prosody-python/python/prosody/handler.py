"""The handler interface, and the dispatcher that runs it on an event loop."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, Literal

from typing_extensions import TypeAlias, TypeVar

from .context import Context
from .errors import _classify
from .message import ExciseMessage, JSONValue, Message, Timer, _from_epoch, _received

if TYPE_CHECKING:
    from ._prosody import Completion, Inbox

__all__ = ["EventHandler"]

P = TypeVar("P", default=JSONValue)
R = TypeVar("R", default=JSONValue)


class EventHandler(ABC, Generic[P, R]):
    """Handles the events of a subscription.

    Calls for different keys run concurrently; calls for one key run one at a
    time. A call that returns succeeds, and its return value answers a
    request; a call that raises fails, transiently unless classified as
    permanent (see `prosody.errors`).
    """

    @abstractmethod
    async def on_message(self, context: Context, message: Message[P]) -> R:
        """Handle a record."""

    @abstractmethod
    async def on_excise(self, context: Context, message: ExciseMessage) -> R:
        """Delete everything this consumer holds for `message.key`."""

    @abstractmethod
    async def on_timer(self, context: Context, timer: Timer) -> None:
        """Handle a timer that fired."""


_HANDLER_METHODS = ("on_message", "on_excise", "on_timer")


def _handler_method(handler: object, name: str) -> Callable[..., Awaitable[Any]]:
    method: Callable[..., Awaitable[Any]] | None = getattr(handler, name, None)
    if method is None or not inspect.iscoroutinefunction(method):
        raise TypeError(
            f"{type(handler).__qualname__}.{name} must be an async method (async def)"
        )
    return method


# --- tracing -------------------------------------------------------------------

# (attach, detach, extract) from opentelemetry once it is looked up; False when
# it is not installed; None before the first traced call.
_Tracing: TypeAlias = "tuple[Callable[[Any], object], Callable[[Any], None], Callable[[Any], Any]]"
_otel: _Tracing | Literal[False] | None = None


def _tracing() -> _Tracing | None:
    """opentelemetry's attach, detach and extract, or None without it."""
    global _otel
    if _otel is None:
        try:
            from opentelemetry import context as otel_context
            from opentelemetry import propagate
        except ImportError:
            _otel = False
        else:
            _otel = (otel_context.attach, otel_context.detach, propagate.extract)
    return _otel or None


# --- dispatch ------------------------------------------------------------------


async def _run(
    method: Callable[[Context, Any], Awaitable[Any]],
    context: Context,
    event: object,
    done: Completion,
    answers: bool,
) -> None:
    """Run one handler call and report its result (its answer, or `None`
    for a call that answers nothing, such as a timer's) or its failure to
    `done`."""
    try:
        result = await method(context, event)
    except asyncio.CancelledError:
        done.fail("CancelledError", "the handler was cancelled", False)
        raise
    except Exception as error:
        done.fail(*_classify(error))
        return
    except BaseException as error:
        done.fail(*_classify(error))
        raise
    done.ok(result if answers else None)


class _Dispatch:
    """Runs the engine's calls of one subscription as tasks on an event loop.

    The engine queues calls in an inbox and wakes the loop through the
    inbox's socket; `_drain` takes every queued call at once and starts a
    task for each. A task is bound to its `done` before it can start, and
    reports exactly one result unless the engine already gave the call up.
    """

    __slots__ = (
        "_loop",
        "_create_task",
        "_on_message",
        "_on_excise",
        "_on_timer",
        "_inbox",
        "_take",
        "_fd",
    )

    def __init__(self, handler: object, loop: asyncio.AbstractEventLoop) -> None:
        on_message, on_excise, on_timer = (
            _handler_method(handler, name) for name in _HANDLER_METHODS
        )
        self._on_message = on_message
        self._on_excise = on_excise
        self._on_timer = on_timer
        self._loop = loop
        self._fd = -1
        # A task factory may start a task eagerly, before it is bound; build
        # tasks directly then, so a handler never reports before `bind`.
        if loop.get_task_factory() is None:
            self._create_task: Callable[[Any], asyncio.Task[None]] = loop.create_task
        else:
            self._create_task = lambda coro: asyncio.Task(coro, loop=loop)

    def attach(self, inbox: Inbox) -> None:
        """Watch `inbox`: its calls start on this loop from now on."""
        self._inbox = inbox
        self._take = inbox.take
        self._fd = inbox.fileno()
        # Handler tasks start from an empty context, not the subscriber's.
        contextvars.Context().run(self._loop.add_reader, self._fd, self._drain)

    def detach(self) -> None:
        """Stop watching the inbox, and close it: calls still queued fail
        (transiently), cancellations queued are carried out."""
        if self._fd < 0:
            return
        if not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
        self._fd = -1
        self._inbox.close()

    def _drain(self) -> None:
        for call in self._take():
            done: Completion = call[-1]
            try:
                kind = call[0]
                if kind == "message":
                    _, ctx, topic, partition, offset, timestamp, key, payload, native, trace, _ = call
                    message = _received(
                        Message(topic, partition, offset, _from_epoch(timestamp), key, payload),
                        native,
                    )
                    self._launch(self._on_message, Context(ctx), message, trace, done, True)
                elif kind == "excise":
                    _, ctx, topic, partition, offset, timestamp, key, trace, _ = call
                    excise = ExciseMessage(topic, partition, offset, _from_epoch(timestamp), key)
                    self._launch(self._on_excise, Context(ctx), excise, trace, done, True)
                else:
                    _, ctx, key, time, trace, _ = call
                    timer = Timer(key, _from_epoch(time))
                    self._launch(self._on_timer, Context(ctx), timer, trace, done, False)
            except Exception as error:
                done.fail(*_classify(error))

    def _launch(
        self,
        method: Callable[[Context, Any], Awaitable[Any]],
        context: Context,
        event: object,
        trace: dict[str, str] | None,
        done: Completion,
        answers: bool,
    ) -> None:
        tracing = _tracing() if trace else None
        if tracing is None:
            task = self._create_task(_run(method, context, event, done, answers))
        else:
            attach, detach, extract = tracing
            # The task copies the current context, so it keeps the engine's
            # span as its parent after the detach.
            token = attach(extract(trace))
            try:
                task = self._create_task(_run(method, context, event, done, answers))
            finally:
                detach(token)
        try:
            bound = done.bind(task)
        except BaseException:
            task.cancel()
            raise
        if not bound:
            # Already cancelled: the task is dropped before it starts.
            task.cancel()
