"""Keyed state: collection definitions and their constructors.

A definition names a durable collection and its options. Register it with
`ProsodyClient.create(state_collections=[...])`, bind it to the current key
with `context.state(definition)`, and read a published one from anywhere with
`await client.state(subsystem, definition)`. The handles these return are in
`prosody.handles` and are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, Union

from typing_extensions import TypeAlias, TypeVar

from .handles import (
    DequeState,
    Direction,
    MapState,
    PublishedDeque,
    PublishedMap,
    PublishedValue,
    ValueState,
    _as_is,
    _json_in,
    _message_in,
)
from .message import JSONValue, Message, _stored_message

if TYPE_CHECKING:
    from ._prosody import NativeContext, NativeReader

__all__ = [
    "Direction",
    "value",
    "map",
    "deque",
    "message_value",
    "message_map",
    "message_deque",
    "ValueDefinition",
    "MapDefinition",
    "DequeDefinition",
    "MessageValueDefinition",
    "MessageMapDefinition",
    "MessageDequeDefinition",
    "ValueState",
    "MapState",
    "DequeState",
    "PublishedValue",
    "PublishedMap",
    "PublishedDeque",
]

T = TypeVar("T", default=JSONValue)
V = TypeVar("V", default=JSONValue)
P = TypeVar("P", default=JSONValue)

ReadCache: TypeAlias = Union[timedelta, Literal[False], None]


# --- definitions -----------------------------------------------------------


def _seconds(duration: timedelta | None) -> float | None:
    return None if duration is None else duration.total_seconds()


def _check(
    name: str,
    ttl: object,
    read_uncommitted: object,
    published: object = None,
    read_cache: object = None,
    limit: tuple[str, object] | None = None,
) -> None:
    """Reject options of the wrong type when a definition is made."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"a collection name is a non-empty str, not {name!r}")
    if ttl is not None and not isinstance(ttl, timedelta):
        raise TypeError(f"{name}: ttl is a timedelta or None, not {ttl!r}")
    for option, given in (("read_uncommitted", read_uncommitted), ("published", published)):
        if given is not None and not isinstance(given, bool):
            raise TypeError(f"{name}: {option} is a bool or None, not {given!r}")
    if not (read_cache is None or read_cache is False or isinstance(read_cache, timedelta)):
        raise TypeError(
            f"{name}: read_cache is a timedelta, False or None, not {read_cache!r}"
        )
    if limit is not None:
        option, given = limit
        if given is not None and (isinstance(given, bool) or not isinstance(given, int)):
            raise TypeError(f"{name}: {option} is an int or None, not {given!r}")


def _config(
    definition: Any,
    published: bool | None = None,
    read_cache: ReadCache = None,
    keyset_limit: int | None = None,
    capacity: int | None = None,
) -> dict[str, Any]:
    return {
        "name": definition.name,
        "kind": definition.kind,
        "payload": definition.payload,
        "ttl": _seconds(definition.ttl),
        "read_uncommitted": definition.read_uncommitted,
        "published": published,
        "read_cache": read_cache.total_seconds()
        if isinstance(read_cache, timedelta)
        else read_cache,
        "keyset_limit": keyset_limit,
        "capacity": capacity,
    }


@dataclass(frozen=True)
class ValueDefinition(Generic[T]):
    """A value of JSON type `T` for each key."""

    name: str
    ttl: timedelta | None = None
    read_uncommitted: bool | None = None
    published: bool | None = None
    read_cache: ReadCache = None
    kind: Literal["value"] = field(default="value", init=False)
    payload: Literal["json"] = field(default="json", init=False)

    def to_config(self) -> dict[str, Any]:
        """The `state_collections` entry for this definition."""
        return _config(self, self.published, self.read_cache)

    def _bind(self, context: NativeContext) -> ValueState[T]:
        return ValueState(context, self.name, _json_in, _as_is)

    def _reader(self, reader: NativeReader) -> PublishedValue[T]:
        return PublishedValue(reader)


@dataclass(frozen=True)
class MapDefinition(Generic[V]):
    """An ordered map from `str` keys to JSON values of type `V`, per key."""

    name: str
    ttl: timedelta | None = None
    read_uncommitted: bool | None = None
    published: bool | None = None
    read_cache: ReadCache = None
    keyset_limit: int | None = None
    kind: Literal["map"] = field(default="map", init=False)
    payload: Literal["json"] = field(default="json", init=False)

    def to_config(self) -> dict[str, Any]:
        """The `state_collections` entry for this definition."""
        return _config(self, self.published, self.read_cache, keyset_limit=self.keyset_limit)

    def _bind(self, context: NativeContext) -> MapState[V]:
        return MapState(context, self.name, _json_in, _as_is)

    def _reader(self, reader: NativeReader) -> PublishedMap[V]:
        return PublishedMap(reader)


@dataclass(frozen=True)
class DequeDefinition(Generic[T]):
    """A double-ended queue of JSON values of type `T`, per key."""

    name: str
    ttl: timedelta | None = None
    read_uncommitted: bool | None = None
    published: bool | None = None
    read_cache: ReadCache = None
    capacity: int | None = None
    kind: Literal["deque"] = field(default="deque", init=False)
    payload: Literal["json"] = field(default="json", init=False)

    def to_config(self) -> dict[str, Any]:
        """The `state_collections` entry for this definition."""
        return _config(self, self.published, self.read_cache, capacity=self.capacity)

    def _bind(self, context: NativeContext) -> DequeState[T]:
        return DequeState(context, self.name, _json_in, _as_is)

    def _reader(self, reader: NativeReader) -> PublishedDeque[T]:
        return PublishedDeque(reader)


@dataclass(frozen=True)
class MessageValueDefinition(Generic[P]):
    """A Kafka message with payload type `P` for each key."""

    name: str
    ttl: timedelta | None = None
    read_uncommitted: bool | None = None
    kind: Literal["value"] = field(default="value", init=False)
    payload: Literal["message"] = field(default="message", init=False)

    def to_config(self) -> dict[str, Any]:
        """The `state_collections` entry for this definition."""
        return _config(self)

    def _bind(self, context: NativeContext) -> ValueState[Message[P]]:
        return ValueState(context, self.name, _message_in, _stored_message)


@dataclass(frozen=True)
class MessageMapDefinition(Generic[P]):
    """An ordered map from `str` keys to Kafka messages, per key."""

    name: str
    ttl: timedelta | None = None
    read_uncommitted: bool | None = None
    keyset_limit: int | None = None
    kind: Literal["map"] = field(default="map", init=False)
    payload: Literal["message"] = field(default="message", init=False)

    def to_config(self) -> dict[str, Any]:
        """The `state_collections` entry for this definition."""
        return _config(self, keyset_limit=self.keyset_limit)

    def _bind(self, context: NativeContext) -> MapState[Message[P]]:
        return MapState(context, self.name, _message_in, _stored_message)


@dataclass(frozen=True)
class MessageDequeDefinition(Generic[P]):
    """A double-ended queue of Kafka messages, per key."""

    name: str
    ttl: timedelta | None = None
    read_uncommitted: bool | None = None
    capacity: int | None = None
    kind: Literal["deque"] = field(default="deque", init=False)
    payload: Literal["message"] = field(default="message", init=False)

    def to_config(self) -> dict[str, Any]:
        """The `state_collections` entry for this definition."""
        return _config(self, capacity=self.capacity)

    def _bind(self, context: NativeContext) -> DequeState[Message[P]]:
        return DequeState(context, self.name, _message_in, _stored_message)


def value(
    name: str,
    *,
    ttl: timedelta | None = None,
    read_uncommitted: bool | None = None,
    published: bool | None = None,
    read_cache: ReadCache = None,
) -> ValueDefinition[T]:
    """Define a JSON value collection. Annotate the result to fix `T`."""
    _check(name, ttl, read_uncommitted, published, read_cache)
    return ValueDefinition(name, ttl, read_uncommitted, published, read_cache)


def map(  # noqa: A001 - the README's name
    name: str,
    *,
    ttl: timedelta | None = None,
    read_uncommitted: bool | None = None,
    published: bool | None = None,
    read_cache: ReadCache = None,
    keyset_limit: int | None = None,
) -> MapDefinition[V]:
    """Define a JSON map collection. Annotate the result to fix `V`."""
    _check(name, ttl, read_uncommitted, published, read_cache, ("keyset_limit", keyset_limit))
    return MapDefinition(name, ttl, read_uncommitted, published, read_cache, keyset_limit)


def deque(
    name: str,
    *,
    ttl: timedelta | None = None,
    read_uncommitted: bool | None = None,
    published: bool | None = None,
    read_cache: ReadCache = None,
    capacity: int | None = None,
) -> DequeDefinition[T]:
    """Define a JSON deque collection. Annotate the result to fix `T`."""
    _check(name, ttl, read_uncommitted, published, read_cache, ("capacity", capacity))
    return DequeDefinition(name, ttl, read_uncommitted, published, read_cache, capacity)


def message_value(
    name: str,
    *,
    ttl: timedelta | None = None,
    read_uncommitted: bool | None = None,
) -> MessageValueDefinition[P]:
    """Define a collection holding one Kafka message per key."""
    _check(name, ttl, read_uncommitted)
    return MessageValueDefinition(name, ttl, read_uncommitted)


def message_map(
    name: str,
    *,
    ttl: timedelta | None = None,
    read_uncommitted: bool | None = None,
    keyset_limit: int | None = None,
) -> MessageMapDefinition[P]:
    """Define a map of Kafka messages per key."""
    _check(name, ttl, read_uncommitted, limit=("keyset_limit", keyset_limit))
    return MessageMapDefinition(name, ttl, read_uncommitted, keyset_limit)


def message_deque(
    name: str,
    *,
    ttl: timedelta | None = None,
    read_uncommitted: bool | None = None,
    capacity: int | None = None,
) -> MessageDequeDefinition[P]:
    """Define a deque of Kafka messages per key."""
    _check(name, ttl, read_uncommitted, limit=("capacity", capacity))
    return MessageDequeDefinition(name, ttl, read_uncommitted, capacity)
