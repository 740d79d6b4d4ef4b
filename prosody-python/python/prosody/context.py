"""The context of one handler call: timers, cancellation and keyed state."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, overload

from typing_extensions import TypeVar

from .handles import DequeState, MapState, ValueState
from .message import JSONValue, Message, _from_epoch
from .state import (
    DequeDefinition,
    MapDefinition,
    MessageDequeDefinition,
    MessageMapDefinition,
    MessageValueDefinition,
    ValueDefinition,
)

if TYPE_CHECKING:
    from ._prosody import NativeContext

__all__ = ["Context"]

T = TypeVar("T", default=JSONValue)
V = TypeVar("V", default=JSONValue)
P = TypeVar("P", default=JSONValue)


def _epoch(time: datetime) -> float:
    """Epoch seconds of an aware datetime; a naive one is a ValueError."""
    if not isinstance(time, datetime):
        raise TypeError(f"a timer time is a datetime, not {type(time).__qualname__}")
    if time.utcoffset() is None:
        raise ValueError(
            f"the timer time {time.isoformat()} is naive; give it a timezone, "
            "e.g. datetime.now(timezone.utc)"
        )
    return time.timestamp()


class Context:
    """Operations on the key of the event being handled.

    Timer times are aware datetimes, kept to whole seconds. Valid only during
    the handler call it was given to.
    """

    __slots__ = ("_native",)

    def __init__(self, native: NativeContext) -> None:
        self._native = native

    async def schedule(self, time: datetime) -> None:
        """Schedule a timer for this key at `time`."""
        self._native.schedule(_epoch(time))

    async def clear_and_schedule(self, time: datetime) -> None:
        """Replace all of this key's timers with one at `time`."""
        self._native.clear_and_schedule(_epoch(time))

    async def unschedule(self, time: datetime) -> None:
        """Remove this key's timer at `time`, if any."""
        self._native.unschedule(_epoch(time))

    async def clear_scheduled(self) -> None:
        """Remove all of this key's timers."""
        self._native.clear_scheduled()

    async def scheduled(self) -> list[datetime]:
        """The times of this key's timers, as aware UTC datetimes."""
        return [_from_epoch(at) for at in await self._native.scheduled()]

    def should_cancel(self) -> bool:
        """Whether the call has been asked to stop (timeout, rebalance or
        shutdown)."""
        return self._native.should_cancel()

    async def on_cancel(self) -> None:
        """Complete once the call has been asked to stop."""
        await self._native.on_cancel()

    @overload
    def state(self, definition: ValueDefinition[T]) -> ValueState[T]: ...
    @overload
    def state(self, definition: MapDefinition[V]) -> MapState[V]: ...
    @overload
    def state(self, definition: DequeDefinition[T]) -> DequeState[T]: ...
    @overload
    def state(self, definition: MessageValueDefinition[P]) -> ValueState[Message[P]]: ...
    @overload
    def state(self, definition: MessageMapDefinition[P]) -> MapState[Message[P]]: ...
    @overload
    def state(self, definition: MessageDequeDefinition[P]) -> DequeState[Message[P]]: ...
    def state(self, definition: Any) -> Any:
        """Bind a registered collection to this key for the current attempt.

        An unregistered definition, or one registered with another kind or
        payload, raises `PermanentStateError`.
        """
        try:
            bind = definition._bind
        except AttributeError:
            raise TypeError(
                f"context.state() takes a collection definition, not {definition!r}"
            ) from None
        self._native.check(definition.name, definition.kind, definition.payload)
        return bind(self._native)
