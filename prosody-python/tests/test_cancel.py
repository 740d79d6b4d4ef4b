"""Cancellation and stalls in mock mode: a handler that holds the GIL shows
as a stall; a member joining the group takes partitions from calls in
flight, which are told to stop, and handles their records."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prosody import Context, EventHandler, ExciseMessage, Message, Timer

from support import mock_client, unique, until


class Recording(EventHandler):
    """Records each message it handles."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def on_message(self, context: Context, message: Message) -> Any:
        self.messages.append(message)
        return None

    async def on_excise(self, context: Context, message: ExciseMessage) -> None:
        pass

    async def on_timer(self, context: Context, timer: Timer) -> None:
        pass


async def test_a_handler_that_holds_the_gil_in_a_busy_loop_shows_as_a_stall() -> None:
    stalled: list[bool] = []

    class Spinning(Recording):
        async def on_message(self, context: Context, message: Message) -> Any:
            if message.key == "spin" and not stalled:
                end = time.monotonic() + 5.5
                while time.monotonic() < end:  # holds the GIL, deliberately
                    pass
                stalled.append(client._native.is_stalled())
            return await super().on_message(context, message)

    # Without deferral the timed-out record is retried in place, so the
    # partition makes no progress while the loop spins.
    client, topic = await mock_client(stall_threshold=4.0, timeout=0.9, defer_enabled=False)
    handler = Spinning()
    client.subscribe(handler)
    await client.send(topic, "spin", {})
    expected = {"spin"} | {f"after-{n}" for n in range(20)}
    for n in range(20):
        await client.send(topic, f"after-{n}", {})
    await until(lambda: {m.key for m in handler.messages} == expected)
    assert stalled == [True]
    await until(lambda: not client._native.is_stalled())
    await client.shutdown()


class Holding(Recording):
    """Holds every call until the engine cancels it, then fails (so the
    record is not taken as handled)."""

    def __init__(self) -> None:
        super().__init__()
        self.started: dict[str, int] = {}
        self.cancelled: list[str] = []

    async def on_message(self, context: Context, message: Message) -> Any:
        self.started[message.key] = message.partition
        await context.on_cancel()
        self.cancelled.append(message.key)
        raise RuntimeError("stopping: the engine asked")


async def test_a_member_joining_cancels_the_calls_on_the_partitions_it_takes() -> None:
    group = unique("group")
    first, topic = await mock_client(group_id=group, shutdown_timeout=2.0)
    holder = Holding()
    first.subscribe(holder)
    keys = [f"key-{n}" for n in range(8)]
    for key in keys:
        await first.send(topic, key, {})
    await until(lambda: set(holder.started) == set(keys))
    assert len(set(holder.started.values())) > 1, f"the keys share a partition: {holder.started}"
    assert holder.cancelled == []
    # A second member joins; the first stays, and gives up some partitions.
    second, _ = await mock_client(group_id=group, subscribed_topics=topic)
    taker = Recording()
    second.subscribe(taker)

    def taken() -> set[str]:
        return {m.key for m in taker.messages}

    await until(lambda: holder.cancelled != [] and set(holder.cancelled) <= taken())
    moved = {holder.started[key] for key in holder.cancelled}
    on_moved = {key for key, partition in holder.started.items() if partition in moved}
    assert set(holder.cancelled) == on_moved, "a call on a partition that moved was not cancelled"
    held = set(keys) - on_moved
    assert held, f"the first member gave up every partition: {holder.started}"
    assert await first.assigned_partition_count() > 0
    assert not held & taken(), "the second member handled a key the first still holds"
    await second.shutdown()
    await first.shutdown()
