"""Helpers of the suite: unique names, clients in mock mode, waiting on
events with a deadline (never a sleep)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Awaitable, Callable, TypeVar

from prosody import ProsodyClient

T = TypeVar("T")

#: How long any wait of the suite may take before it fails.
DEADLINE = 20.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def mock_client(**options: Any) -> tuple[ProsodyClient, str]:
    """A client in mock mode that consumes its own topic (its source
    system differs from its group, so its own records reach it)."""
    topic = options.pop("subscribed_topics", None) or unique("topic")
    config: dict[str, Any] = {
        "mock": True,
        "group_id": unique("group"),
        "source_system": unique("source"),
        "subscribed_topics": topic,
        "probe_port": None,
    }
    config.update(options)
    client = await ProsodyClient.create(**config)
    return client, topic


async def within(awaitable: Awaitable[T], seconds: float = DEADLINE) -> T:
    return await asyncio.wait_for(awaitable, seconds)


async def until(check: Callable[[], bool], seconds: float = DEADLINE) -> None:
    """Waits until `check()` holds, polling the event loop, or fails."""

    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.02)

    await within(poll(), seconds)
