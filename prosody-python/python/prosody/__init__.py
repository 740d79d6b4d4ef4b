"""Prosody: a Kafka client with per-key ordering, timers, keyed state and
requests, driven from asyncio."""

from .admin import AdminClient
from .client import ProsodyClient
from .context import Context
from .errors import (
    EventHandlerError,
    NullValueError,
    PermanentError,
    PermanentStateError,
    StateError,
    TransientError,
    TransientStateError,
    permanent,
    transient,
)
from .handler import EventHandler
from .message import ExciseMessage, JSONValue, Message, Timer
from .request import (
    Failure,
    FormatMismatch,
    HandlerError,
    MalformedResponse,
    Outcome,
    ResponseError,
    Success,
    Timeout,
)
from .handles import (
    DequeState,
    Direction,
    MapState,
    PublishedDeque,
    PublishedMap,
    PublishedValue,
    ValueState,
)
from .state import (
    DequeDefinition,
    MapDefinition,
    MessageDequeDefinition,
    MessageMapDefinition,
    MessageValueDefinition,
    ValueDefinition,
    deque,
    map,
    message_deque,
    message_map,
    message_value,
    value,
)
from .telemetry import flush_telemetry, shutdown_telemetry

__all__ = [
    "AdminClient",
    "Context",
    "DequeDefinition",
    "DequeState",
    "Direction",
    "EventHandler",
    "EventHandlerError",
    "ExciseMessage",
    "Failure",
    "FormatMismatch",
    "HandlerError",
    "JSONValue",
    "MalformedResponse",
    "MapDefinition",
    "MapState",
    "Message",
    "MessageDequeDefinition",
    "MessageMapDefinition",
    "MessageValueDefinition",
    "NullValueError",
    "Outcome",
    "PermanentError",
    "PermanentStateError",
    "ProsodyClient",
    "PublishedDeque",
    "PublishedMap",
    "PublishedValue",
    "ResponseError",
    "StateError",
    "Success",
    "Timeout",
    "Timer",
    "TransientError",
    "TransientStateError",
    "ValueDefinition",
    "ValueState",
    "deque",
    "flush_telemetry",
    "map",
    "message_deque",
    "message_map",
    "message_value",
    "permanent",
    "shutdown_telemetry",
    "transient",
    "value",
]
