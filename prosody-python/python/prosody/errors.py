"""Handler and keyed-state errors, and how a failure is classified.

A handler failure is transient (Prosody retries it) unless it is classified
as permanent: by raising a `PermanentError`, or by a `@permanent(...)`
decorator on the handler method that lists its type.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from typing_extensions import ParamSpec, TypeVar

__all__ = [
    "EventHandlerError",
    "TransientError",
    "PermanentError",
    "StateError",
    "TransientStateError",
    "PermanentStateError",
    "NullValueError",
    "permanent",
    "transient",
]

_Params = ParamSpec("_Params")
_Result = TypeVar("_Result")

# The attribute a `@permanent`/`@transient` decorator sets on an exception it
# classified. The innermost decorator that matches decides.
_MARK = "__prosody_permanent__"


class EventHandlerError(Exception):
    """Base class of errors that carry their own classification."""

    _permanent = False

    @property
    def is_permanent(self) -> bool:
        """Whether another attempt cannot succeed."""
        return self._permanent


class TransientError(EventHandlerError):
    """An error Prosody retries."""

    _permanent = False


class PermanentError(EventHandlerError):
    """An error another attempt cannot resolve; Prosody does not retry it."""

    _permanent = True


class StateError(EventHandlerError):
    """Base class of keyed-state errors; catch it for both categories."""


class TransientStateError(StateError, TransientError):
    """A keyed-state error that Prosody can retry."""


class NullValueError(TransientStateError, ValueError):
    """A `None` (JSON `null`) write; delete with `clear()` or `remove()`."""


class PermanentStateError(StateError, PermanentError):
    """A keyed-state error that another attempt cannot resolve, such as an
    unregistered or mismatched collection definition."""


def permanent(
    *exception_types: type[BaseException],
) -> Callable[
    [Callable[_Params, Awaitable[_Result]]],
    Callable[_Params, Coroutine[Any, Any, _Result]],
]:
    """Classify exceptions of these types raised by the decorated handler
    method as permanent. Other exceptions keep their classification."""
    return _classifier(True, exception_types, "permanent")


def transient(
    *exception_types: type[BaseException],
) -> Callable[
    [Callable[_Params, Awaitable[_Result]]],
    Callable[_Params, Coroutine[Any, Any, _Result]],
]:
    """Classify exceptions of these types raised by the decorated handler
    method as transient, even `PermanentError`s. Other exceptions keep their
    classification."""
    return _classifier(False, exception_types, "transient")


def _classifier(
    is_permanent: bool,
    exception_types: tuple[type[BaseException], ...],
    decorator: str,
) -> Callable[
    [Callable[_Params, Awaitable[_Result]]],
    Callable[_Params, Coroutine[Any, Any, _Result]],
]:
    if not exception_types:
        raise TypeError(f"@{decorator}(...) needs at least one exception type")
    for kind in exception_types:
        if not (isinstance(kind, type) and issubclass(kind, BaseException)):
            raise TypeError(
                f"@{decorator}(...) takes exception types, not {kind!r}; "
                f"write @{decorator}(SomeError)"
            )

    def decorate(
        method: Callable[_Params, Awaitable[_Result]],
    ) -> Callable[_Params, Coroutine[Any, Any, _Result]]:
        if not inspect.iscoroutinefunction(method):
            raise TypeError(
                f"@{decorator}(...) applies to async methods, not {method!r}"
            )

        @functools.wraps(method)
        async def classified(*args: _Params.args, **kwargs: _Params.kwargs) -> _Result:
            try:
                return await method(*args, **kwargs)
            except exception_types as error:
                _mark(error, is_permanent)
                raise

        return classified

    return decorate


def _mark(error: BaseException, is_permanent: bool) -> None:
    """Record a decorator's classification unless an inner one already did."""
    # Every exception instance has a __dict__; writing it directly also works
    # for exceptions that forbid attribute assignment (frozen dataclasses).
    vars(error).setdefault(_MARK, is_permanent)


def _classify(error: BaseException) -> tuple[str, str, bool]:
    """The type name, message and permanence a failure is reported with."""
    marked = vars(error).get(_MARK)
    if marked is not None:
        return type(error).__qualname__, str(error), bool(marked)
    if isinstance(error, EventHandlerError):
        return type(error).__qualname__, str(error), error.is_permanent
    return type(error).__qualname__, str(error), False
