"""The Prosody client: produce, consume, request and read published state."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator, Iterable, Mapping
from datetime import timedelta
from typing import Any, overload

from typing_extensions import Self, TypeVar

from . import _prosody
from .handler import EventHandler, _Dispatch
from .handles import PublishedDeque, PublishedMap, PublishedValue
from .message import JSONValue
from .request import Outcome, _outcomes
from .state import DequeDefinition, MapDefinition, ValueDefinition

__all__ = ["ProsodyClient"]

T = TypeVar("T", default=JSONValue)
V = TypeVar("V", default=JSONValue)
P = TypeVar("P", default=JSONValue)
R = TypeVar("R", default=JSONValue)


class _Done:
    """An awaitable that is already complete."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # makes this a generator that finishes at once


_DONE = _Done()


def _seconds(name: str, duration: timedelta | float | None) -> float | None:
    if duration is None:
        return None
    if isinstance(duration, timedelta):
        return duration.total_seconds()
    if isinstance(duration, (int, float)) and not isinstance(duration, bool):
        return float(duration)
    raise TypeError(f"{name} is a timedelta or seconds, not {duration!r}")


def _collections(value: object) -> list[dict[str, Any]]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"state_collections is a list of definitions, not {value!r}")
    entries = []
    for definition in value:
        if isinstance(definition, Mapping):
            entries.append(dict(definition))
            continue
        to_config = getattr(definition, "to_config", None)
        if to_config is None:
            raise TypeError(
                f"state_collections holds collection definitions, not {definition!r}"
            )
        entries.append(to_config())
    return entries


def _option(name: str, value: object) -> Any:
    """The engine's form of one configuration option."""
    if name == "state_collections":
        return None if value is None else _collections(value)
    if name == "probe_port" and value is False:
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (list, tuple)):
        for item in value:
            if not isinstance(item, str):
                raise TypeError(f"{name} holds strings, not {item!r}")
        return list(value)
    raise TypeError(f"{name} does not take a {type(value).__qualname__}: {value!r}")


def _subsystems(subsystems: str | Iterable[str]) -> list[str]:
    if isinstance(subsystems, str):
        return [subsystems]
    names = list(subsystems)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"subsystems holds names, not {name!r}")
    return names


def _timeout(timeout: timedelta | float) -> float:
    seconds = _seconds("timeout", timeout)
    if seconds is None:
        raise TypeError("a request needs a timeout: a timedelta or seconds")
    return seconds


class ProsodyClient:
    """A client for one consumer group: it sends, requests, subscribes a
    handler and reads published state.

    Build it with `await ProsodyClient.create(...)`. Call `shutdown()` before
    the application ends.
    """

    __slots__ = ("_native", "_dispatch")

    _native: _prosody.NativeClient
    _dispatch: _Dispatch | None

    def __init__(self, *args: object, **config: object) -> None:
        raise TypeError(
            "ProsodyClient is built asynchronously: use `await ProsodyClient.create(...)`"
        )

    @classmethod
    async def create(cls, **config: object) -> Self:
        """Build a client from configuration options, without blocking the
        event loop.

        Options are the keyword names of CONFIGURATION.md; an option left out
        comes from its environment variable, then its default. Durations are
        `timedelta`s or seconds. An unknown option raises `TypeError`, an
        invalid value `ValueError`.
        """
        options = {name: _option(name, given) for name, given in config.items()}
        client = cls.__new__(cls)
        client._native = await _prosody.NativeClient.create(options)
        client._dispatch = None
        return client

    @property
    def source_system(self) -> str:
        """The `source-system` header of records this client sends."""
        return self._native.source_system

    async def send(self, topic: str, key: str, payload: JSONValue) -> None:
        """Send a JSON payload; returns once the broker has it."""
        await self._native.send(topic, key, payload)

    async def excise(self, topic: str, key: str) -> None:
        """Send an excise record (a key with no payload) for `key`."""
        await self._native.excise(topic, key)

    async def request(
        self,
        topic: str,
        key: str,
        payload: JSONValue,
        *,
        subsystems: str | Iterable[str],
        timeout: timedelta | float,
    ) -> dict[str, Outcome[JSONValue]]:
        """Send a record and wait for the subsystems' responses.

        The result has one outcome for every selected subsystem, keyed by its
        canonical name; a missing response is a `Timeout` failure. Request-level
        failures (invalid input, a failed send, shutdown) raise.
        """
        raw = await self._native.request(
            topic, key, payload, _subsystems(subsystems), _timeout(timeout)
        )
        return _outcomes(raw)

    async def request_excise(
        self,
        topic: str,
        key: str,
        *,
        subsystems: str | Iterable[str],
        timeout: timedelta | float,
    ) -> dict[str, Outcome[JSONValue]]:
        """Send an excise record as a request; outcomes as for `request`."""
        raw = await self._native.request_excise(
            topic, key, _subsystems(subsystems), _timeout(timeout)
        )
        return _outcomes(raw)

    def subscribe(self, handler: EventHandler[P, R]) -> Awaitable[None]:
        """Start consuming with `handler` on the running event loop.

        Consumption has started when this returns; awaiting the result is
        optional. A handler without async `on_message`, `on_excise` and
        `on_timer` methods raises `TypeError` before anything is consumed.
        """
        dispatch = _Dispatch(handler, asyncio.get_running_loop())
        dispatch.attach(self._native.subscribe())
        previous, self._dispatch = self._dispatch, dispatch
        if previous is not None:
            previous.detach()
        return _DONE

    async def unsubscribe(self) -> None:
        """Stop consuming; the client can subscribe again."""
        try:
            await self._native.unsubscribe()
        finally:
            self._detach()

    async def shutdown(self) -> None:
        """Stop all client services; concurrent and repeated calls await the
        same shutdown."""
        try:
            await self._native.shutdown()
        finally:
            self._detach()

    def _detach(self) -> None:
        """Stop watching the ended subscription's calls (its handler calls
        have all settled or been cancelled)."""
        dispatch, self._dispatch = self._dispatch, None
        if dispatch is not None:
            dispatch.detach()

    async def consumer_state(self) -> str:
        """The consumer's current state."""
        return self._native.consumer_state()

    async def assigned_partition_count(self) -> int:
        """The number of partitions assigned to this consumer."""
        return self._native.assigned_partition_count()

    async def is_stalled(self) -> bool:
        """Whether a partition has made no progress within `stall_threshold`."""
        return self._native.is_stalled()

    @overload
    async def state(self, subsystem: str, definition: ValueDefinition[T]) -> PublishedValue[T]: ...
    @overload
    async def state(self, subsystem: str, definition: MapDefinition[V]) -> PublishedMap[V]: ...
    @overload
    async def state(self, subsystem: str, definition: DequeDefinition[T]) -> PublishedDeque[T]: ...
    async def state(self, subsystem: str, definition: Any) -> Any:
        """Open a read-only reader of a collection `subsystem` publishes.

        Only JSON definitions can be published; a message definition raises
        `TypeError`.
        """
        try:
            open_reader = definition._reader
        except AttributeError:
            raise TypeError(
                "client.state() takes a JSON collection definition (value, map or "
                f"deque); {definition!r} cannot be published"
            ) from None
        return open_reader(await self._native.published(subsystem, definition.to_config()))
