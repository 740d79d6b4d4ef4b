"""The events a handler receives: messages, excise records and timers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Generic, Union

from typing_extensions import TypeAlias, TypeVar

__all__ = ["JSONValue", "Message", "ExciseMessage", "Timer"]

JSONValue: TypeAlias = Union[
    str, int, float, bool, None, dict[str, "JSONValue"], list["JSONValue"]
]
"""Any value with a JSON representation."""

P = TypeVar("P", default=JSONValue)


@dataclass(frozen=True, slots=True)
class Message(Generic[P]):
    """A Kafka record delivered to `on_message`.

    `payload` is the decoded JSON; its declared type `P` is a static contract
    only and is never validated.
    """

    topic: str
    partition: int
    offset: int
    timestamp: datetime
    key: str
    payload: P
    # The engine's handle on the stored record; present on every message
    # Prosody delivers or reads back from keyed state, needed to store it.
    _native: object = field(default=None, init=False, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ExciseMessage:
    """An excise record delivered to `on_excise`: a key with no payload."""

    topic: str
    partition: int
    offset: int
    timestamp: datetime
    key: str


@dataclass(frozen=True, slots=True)
class Timer:
    """A timer that fired for `key`; `time` is when it was scheduled for."""

    key: str
    time: datetime


def _from_epoch(seconds: float) -> datetime:
    """An aware UTC datetime for epoch seconds."""
    return datetime.fromtimestamp(seconds, timezone.utc)


def _stored_message(stored: Any) -> Any:
    """The `Message` for a record read back from a message collection.

    `None` (absence) stays `None`.
    """
    if stored is None:
        return None
    return _received(
        Message(
            stored["topic"],
            stored["partition"],
            stored["offset"],
            datetime.fromtimestamp(stored["timestamp"], timezone.utc),
            stored["key"],
            stored["payload"],
        ),
        stored["native"],
    )


def _received(message: Message[Any], native: object) -> Message[Any]:
    """`message`, tied to the record it was built from: only such a
    message can be stored in a message collection (a copy made with
    `dataclasses.replace` is not)."""
    object.__setattr__(message, "_native", native)
    return message
