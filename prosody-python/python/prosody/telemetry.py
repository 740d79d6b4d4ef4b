"""Control of the telemetry Prosody exports itself."""

from __future__ import annotations

from . import _prosody

__all__ = ["flush_telemetry", "shutdown_telemetry"]


def flush_telemetry() -> None:
    """Export pending telemetry; returns once it is exported."""
    _prosody.flush_telemetry()


def shutdown_telemetry() -> None:
    """Export pending telemetry, then stop Prosody's telemetry providers."""
    _prosody.shutdown_telemetry()
