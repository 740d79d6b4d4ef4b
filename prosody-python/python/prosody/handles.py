"""Keyed state handles: a collection bound to the current key in a handler,
and read-only readers of another subsystem's published collections.

Obtain a handle with `context.state(definition)` and a reader with
`await client.state(subsystem, definition)`; the definitions are in
`prosody.state`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any, Generic, overload

from typing_extensions import TypeVar

from .errors import NullValueError
from .message import JSONValue, Message

if TYPE_CHECKING:
    from ._prosody import NativeContext, NativeReader, NativeScan

__all__ = [
    "Direction",
    "ValueState",
    "MapState",
    "DequeState",
    "PublishedValue",
    "PublishedMap",
    "PublishedDeque",
]

T = TypeVar("T", default=JSONValue)
V = TypeVar("V", default=JSONValue)
D = TypeVar("D")
I = TypeVar("I")


class Direction(str, Enum):
    """The order of a map or deque scan."""

    FORWARD = "forward"
    BACKWARD = "backward"


# --- value codecs ------------------------------------------------------------


def _as_is(stored: Any) -> Any:
    return stored


def _json_in(item: object) -> object:
    if item is None:
        raise NullValueError("None cannot be stored; use clear() or remove() to delete")
    return item


def _message_in(item: object) -> object:
    if item is None:
        raise NullValueError("None cannot be stored; use clear() or remove() to delete")
    native = item._native if isinstance(item, Message) else None
    if native is None:
        raise TypeError(
            "a message collection stores Message objects received from Prosody, "
            f"not {type(item).__qualname__}"
        )
    return native


async def _chunks(scan: NativeScan) -> AsyncIterator[Any]:
    """The elements of a native scan, read a chunk at a time as they are
    iterated; leaving the iteration early stops the scan."""
    while (chunk := await scan.next()) is not None:
        for element in chunk:
            yield element


def _direction(direction: Direction) -> str:
    return Direction(direction).value


# --- handler handles ---------------------------------------------------------
#
# A handle encodes what it writes (`None` is refused) and decodes what it
# reads; decoding maps absence (`None`) to `None`.


class _Handle(Generic[I]):
    """What every handle holds: the collection's name, the context's state
    operations and scans, and the item codec; and the collection's
    transaction controls."""

    __slots__ = ("_call", "_scan", "_name", "_encode", "_decode")

    def __init__(
        self,
        context: NativeContext,
        name: str,
        encode: Callable[[I], object],
        decode: Callable[[Any], I],
    ) -> None:
        self._call = context.state
        self._scan = context.scan
        self._name = name
        self._encode = encode
        self._decode = decode

    async def commit(self) -> None:
        """Commit this collection's pending changes now."""
        await self._call(self._name, "commit", ())

    async def rollback(self) -> None:
        """Discard this collection's changes since the last commit."""
        await self._call(self._name, "rollback", ())


class ValueState(_Handle[T]):
    """The current key's value in one collection, for the current attempt."""

    __slots__ = ()

    async def get(self) -> T | None:
        """The value, or `None` when there is none."""
        return self._decode(await self._call(self._name, "get", ()))

    async def set(self, value: T) -> None:
        """Replace the value. `None` raises `NullValueError`; use `clear()`."""
        await self._call(self._name, "set", (self._encode(value),))

    async def clear(self) -> None:
        """Remove the value."""
        await self._call(self._name, "clear", ())


class MapState(_Handle[V]):
    """The current key's ordered `str`-keyed map in one collection."""

    __slots__ = ()

    @overload
    async def get(self, key: str) -> V | None: ...
    @overload
    async def get(self, key: str, default: D) -> V | D: ...
    async def get(self, key: str, default: object = None) -> object:
        """The entry's value; `default` only when the map has no such key."""
        stored = await self._call(self._name, "get", (key,))
        return default if stored is None else self._decode(stored)

    async def get_many(self, keys: Iterable[str]) -> list[V | None]:
        """The values of these keys in order, `None` for each absent one."""
        decode = self._decode
        stored = await self._call(self._name, "get_many", (list(keys),))
        return [decode(item) for item in stored]

    async def contains(self, key: str) -> bool:
        """Whether the map has this key."""
        return bool(await self._call(self._name, "contains", (key,)))

    async def set(self, key: str, value: V) -> None:
        """Insert or replace an entry. `None` raises `NullValueError`."""
        await self._call(self._name, "set", (key, self._encode(value)))

    async def remove(self, key: str) -> None:
        """Remove an entry if present."""
        await self._call(self._name, "remove", (key,))

    async def clear(self) -> None:
        """Remove every entry."""
        await self._call(self._name, "clear", ())

    async def items(
        self, direction: Direction = Direction.FORWARD
    ) -> AsyncIterator[tuple[str, V]]:
        """Iterate over `(key, value)` entries in key order."""
        decode = self._decode
        async for key, stored in _chunks(self._scan(self._name, "items", (_direction(direction),))):
            yield key, decode(stored)

    async def keys(self, direction: Direction = Direction.FORWARD) -> AsyncIterator[str]:
        """Iterate over the keys in order."""
        async for key in _chunks(self._scan(self._name, "keys", (_direction(direction),))):
            yield key

    async def values(self) -> AsyncIterator[V]:
        """Iterate over the values in key order."""
        decode = self._decode
        async for stored in _chunks(self._scan(self._name, "values", ())):
            yield decode(stored)

    def __aiter__(self) -> AsyncIterator[str]:
        """Iterate over the keys in forward order."""
        return self.keys()


class DequeState(_Handle[T]):
    """The current key's double-ended queue in one collection."""

    __slots__ = ()

    async def append(self, item: T) -> None:
        """Add an item at the back; a full deque drops its front item."""
        await self._call(self._name, "append", (self._encode(item),))

    async def appendleft(self, item: T) -> None:
        """Add an item at the front; a full deque drops its back item."""
        await self._call(self._name, "appendleft", (self._encode(item),))

    async def pop(self) -> T | None:
        """Remove and return the back item, `None` when empty."""
        return self._decode(await self._call(self._name, "pop", ()))

    async def popleft(self) -> T | None:
        """Remove and return the front item, `None` when empty."""
        return self._decode(await self._call(self._name, "popleft", ()))

    async def peek(self) -> T | None:
        """The back item, `None` when empty."""
        return self._decode(await self._call(self._name, "peek", ()))

    async def peekleft(self) -> T | None:
        """The front item, `None` when empty."""
        return self._decode(await self._call(self._name, "peekleft", ()))

    async def size(self) -> int:
        """The number of items."""
        return int(await self._call(self._name, "size", ()))

    async def is_empty(self) -> bool:
        """Whether the deque has no items."""
        return bool(await self._call(self._name, "is_empty", ()))

    async def clear(self) -> None:
        """Remove every item."""
        await self._call(self._name, "clear", ())

    async def get(self, index: int) -> T | None:
        """The item at `index` from the front, `None` past the end."""
        return self._decode(await self._call(self._name, "get", (index,)))

    async def values(self, direction: Direction = Direction.FORWARD) -> AsyncIterator[T]:
        """Iterate over the items, front to back unless `BACKWARD`."""
        decode = self._decode
        async for stored in _chunks(self._scan(self._name, "values", (_direction(direction),))):
            yield decode(stored)

    def __aiter__(self) -> AsyncIterator[T]:
        """Iterate over the items front to back."""
        return self.values()


# --- published readers -------------------------------------------------------


class _Reader:
    """What every published reader holds: the reader's reads and scans."""

    __slots__ = ("_call", "_scan")

    def __init__(self, reader: NativeReader) -> None:
        self._call = reader.call
        self._scan = reader.scan


class PublishedValue(_Reader, Generic[T]):
    """Read-only access to a published value collection of another subsystem."""

    __slots__ = ()

    async def get(self, key: str) -> T | None:
        """The committed value for `key`, `None` when there is none."""
        found: T | None = await self._call("get", key, ())
        return found


class PublishedMap(_Reader, Generic[V]):
    """Read-only access to a published map collection of another subsystem."""

    __slots__ = ()

    @overload
    async def get(self, key: str, map_key: str) -> V | None: ...
    @overload
    async def get(self, key: str, map_key: str, default: D) -> V | D: ...
    async def get(self, key: str, map_key: str, default: object = None) -> object:
        """The entry of `key`'s map; `default` only when it is absent."""
        stored = await self._call("get", key, (map_key,))
        return default if stored is None else stored

    async def get_many(self, key: str, map_keys: Iterable[str]) -> list[V | None]:
        """The values of these entries of `key`'s map, `None` for absent ones."""
        found: list[V | None] = await self._call("get_many", key, (list(map_keys),))
        return found

    async def contains(self, key: str, map_key: str) -> bool:
        """Whether `key`'s map has this entry."""
        return bool(await self._call("contains", key, (map_key,)))

    async def items(
        self, key: str, direction: Direction = Direction.FORWARD
    ) -> AsyncIterator[tuple[str, V]]:
        """Iterate over `(map key, value)` entries of `key`'s map."""
        async for map_key, stored in _chunks(self._scan("items", key, (_direction(direction),))):
            yield map_key, stored

    async def keys(
        self, key: str, direction: Direction = Direction.FORWARD
    ) -> AsyncIterator[str]:
        """Iterate over the entry keys of `key`'s map."""
        async for map_key in _chunks(self._scan("keys", key, (_direction(direction),))):
            yield map_key

    async def values(self, key: str) -> AsyncIterator[V]:
        """Iterate over the values of `key`'s map in entry-key order."""
        async for stored in _chunks(self._scan("values", key, ())):
            yield stored


class PublishedDeque(_Reader, Generic[T]):
    """Read-only access to a published deque collection of another subsystem."""

    __slots__ = ()

    async def get(self, key: str, index: int) -> T | None:
        """The item at `index` of `key`'s deque, `None` past the end."""
        found: T | None = await self._call("get", key, (index,))
        return found

    async def size(self, key: str) -> int:
        """The number of items in `key`'s deque."""
        return int(await self._call("size", key, ()))

    async def is_empty(self, key: str) -> bool:
        """Whether `key`'s deque has no items."""
        return bool(await self._call("is_empty", key, ()))

    async def peek(self, key: str) -> T | None:
        """The back item of `key`'s deque, `None` when empty."""
        found: T | None = await self._call("peek", key, ())
        return found

    async def peekleft(self, key: str) -> T | None:
        """The front item of `key`'s deque, `None` when empty."""
        found: T | None = await self._call("peekleft", key, ())
        return found

    async def values(
        self, key: str, direction: Direction = Direction.FORWARD
    ) -> AsyncIterator[T]:
        """Iterate over the items of `key`'s deque."""
        async for stored in _chunks(self._scan("values", key, (_direction(direction),))):
            yield stored
