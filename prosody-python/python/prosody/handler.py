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
from .message import ExciseMessage, JSONValue, Message, Timer, _from_epoch

if TYPE_CHECKING:
    from ._prosody import Completion, NativeContext

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
) -> None:
    """Run one handler call and report its result or failure to `done`."""
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
    done.ok(result)


async def _run_timer(
    method: Callable[[Context, Any], Awaitable[Any]],
    context: Context,
    timer: object,
    done: Completion,
) -> None:
    """Run one timer call; it succeeds with no value."""
    try:
        await method(context, timer)
    except asyncio.CancelledError:
        done.fail("CancelledError", "the handler was cancelled", False)
        raise
    except Exception as error:
        done.fail(*_classify(error))
        return
    except BaseException as error:
        done.fail(*_classify(error))
        raise
    done.ok(None)


class _Dispatch:
    """Hands the engine's calls to a handler on an event loop.

    The engine calls `message`, `excise` and `timer` from its own threads;
    each returns at once. On the loop, the handler runs in a task that is
    bound to `done` before it can start, and reports exactly one result
    unless the call was already cancelled.
    """

    __slots__ = (
        "_call_soon",
        "_create_task",
        "_context",
        "_on_message",
        "_on_excise",
        "_on_timer",
    )

    def __init__(self, handler: object, loop: asyncio.AbstractEventLoop) -> None:
        on_message, on_excise, on_timer = (
            _handler_method(handler, name) for name in _HANDLER_METHODS
        )
        self._on_message = on_message
        self._on_excise = on_excise
        self._on_timer = on_timer
        self._call_soon = loop.call_soon_threadsafe
        # A task factory may start a task eagerly, before it is bound; build
        # tasks directly then, so a handler never reports before `bind`.
        if loop.get_task_factory() is None:
            self._create_task: Callable[[Any], asyncio.Task[None]] = loop.create_task
        else:
            self._create_task = lambda coro: asyncio.Task(coro, loop=loop)
        # Handler tasks start from an empty context, not the subscriber's.
        self._context = contextvars.Context()

    # Called by the engine, off the loop.

    def message(
        self,
        ctx: NativeContext,
        topic: str,
        partition: int,
        offset: int,
        timestamp: float,
        key: str,
        payload: Any,
        native: object,
        trace: dict[str, str] | None,
        done: Completion,
    ) -> None:
        try:
            self._call_soon(
                self._start_message,
                ctx, topic, partition, offset, timestamp, key, payload, native, trace, done,
                context=self._context,
            )
        except RuntimeError as error:  # the loop is closed
            done.fail(*_classify(error))

    def excise(
        self,
        ctx: NativeContext,
        topic: str,
        partition: int,
        offset: int,
        timestamp: float,
        key: str,
        trace: dict[str, str] | None,
        done: Completion,
    ) -> None:
        try:
            self._call_soon(
                self._start_excise,
                ctx, topic, partition, offset, timestamp, key, trace, done,
                context=self._context,
            )
        except RuntimeError as error:
            done.fail(*_classify(error))

    def timer(
        self,
        ctx: NativeContext,
        key: str,
        time: float,
        trace: dict[str, str] | None,
        done: Completion,
    ) -> None:
        try:
            self._call_soon(
                self._start_timer, ctx, key, time, trace, done, context=self._context
            )
        except RuntimeError as error:
            done.fail(*_classify(error))

    # Run on the loop.

    def _start_message(
        self,
        ctx: NativeContext,
        topic: str,
        partition: int,
        offset: int,
        timestamp: float,
        key: str,
        payload: Any,
        native: object,
        trace: dict[str, str] | None,
        done: Completion,
    ) -> None:
        try:
            message = Message(
                topic, partition, offset, _from_epoch(timestamp), key, payload, _native=native
            )
            self._launch(_run, self._on_message, Context(ctx), message, trace, done)
        except Exception as error:
            done.fail(*_classify(error))

    def _start_excise(
        self,
        ctx: NativeContext,
        topic: str,
        partition: int,
        offset: int,
        timestamp: float,
        key: str,
        trace: dict[str, str] | None,
        done: Completion,
    ) -> None:
        try:
            message = ExciseMessage(topic, partition, offset, _from_epoch(timestamp), key)
            self._launch(_run, self._on_excise, Context(ctx), message, trace, done)
        except Exception as error:
            done.fail(*_classify(error))

    def _start_timer(
        self,
        ctx: NativeContext,
        key: str,
        time: float,
        trace: dict[str, str] | None,
        done: Completion,
    ) -> None:
        try:
            timer = Timer(key, _from_epoch(time))
            self._launch(_run_timer, self._on_timer, Context(ctx), timer, trace, done)
        except Exception as error:
            done.fail(*_classify(error))

    def _launch(
        self,
        runner: Callable[
            [Callable[[Context, Any], Awaitable[Any]], Context, object, Completion],
            Awaitable[None],
        ],
        method: Callable[[Context, Any], Awaitable[Any]],
        context: Context,
        event: object,
        trace: dict[str, str] | None,
        done: Completion,
    ) -> None:
        tracing = _tracing() if trace else None
        if tracing is None:
            task = self._create_task(runner(method, context, event, done))
        else:
            attach, detach, extract = tracing
            # The task copies the current context, so it keeps the engine's
            # span as its parent after the detach.
            token = attach(extract(trace))
            try:
                task = self._create_task(runner(method, context, event, done))
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
