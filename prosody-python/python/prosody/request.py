"""Request outcomes: one `Success` or `Failure` for each subsystem."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Union

from typing_extensions import TypeAlias, TypeVar

from .message import JSONValue

__all__ = [
    "Success",
    "Failure",
    "Outcome",
    "ResponseError",
    "HandlerError",
    "Timeout",
    "FormatMismatch",
    "MalformedResponse",
]

T = TypeVar("T", default=JSONValue)


@dataclass(frozen=True, slots=True)
class HandlerError:
    """The subsystem's handler failed."""

    message: str


@dataclass(frozen=True, slots=True)
class Timeout:
    """No response arrived before the request's deadline."""

    message: str = "no response arrived before the deadline"


@dataclass(frozen=True, slots=True)
class FormatMismatch:
    """The subsystem answered in a format this client cannot read."""

    message: str


@dataclass(frozen=True, slots=True)
class MalformedResponse:
    """The subsystem's response could not be decoded."""

    message: str


ResponseError: TypeAlias = Union[HandlerError, Timeout, FormatMismatch, MalformedResponse]
"""Every response error; each has a `message`."""


@dataclass(frozen=True, slots=True)
class Success(Generic[T]):
    """The subsystem's handler returned `value`."""

    value: T


@dataclass(frozen=True, slots=True)
class Failure:
    """The subsystem produced no value; `error` says why."""

    error: ResponseError


Outcome: TypeAlias = Union[Success[T], Failure]
"""The result of a request for one subsystem."""

_ERRORS: dict[str, type[HandlerError | Timeout | FormatMismatch | MalformedResponse]] = {
    "handler": HandlerError,
    "timeout": Timeout,
    "format": FormatMismatch,
    "malformed": MalformedResponse,
}


def _outcomes(raw: dict[str, tuple[str, Any]]) -> dict[str, Outcome[JSONValue]]:
    """Outcomes from the engine's `(tag, value or message)` pairs."""
    outcomes: dict[str, Outcome[JSONValue]] = {}
    for subsystem, (tag, detail) in raw.items():
        if tag == "success":
            outcomes[subsystem] = Success(detail)
        else:
            try:
                error = _ERRORS[tag]
            except KeyError:
                raise RuntimeError(
                    f"unknown outcome {tag!r} for subsystem {subsystem!r}"
                ) from None
            outcomes[subsystem] = Failure(error(str(detail)))
    return outcomes
