"""The engine's threads never call into Python: awaitables and handler
calls reach the event loop through its own thread, so the interpreter can
exit while the engine still runs."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from typing import Any

import pytest

from prosody import Context, EventHandler, ExciseMessage, Message, Timer

from support import DEADLINE, mock_client, unique, within


class Watched(asyncio.SelectorEventLoop):
    """A loop that records each call reaching it from a thread not its own."""

    def __init__(self) -> None:
        super().__init__()
        self.owner = threading.get_ident()
        self.foreign: list[str] = []

    def call_soon_threadsafe(self, callback: Any, *args: Any, context: Any = None) -> Any:
        if threading.get_ident() != self.owner:
            self.foreign.append(getattr(callback, "__qualname__", repr(callback)))
        return super().call_soon_threadsafe(callback, *args, context=context)


class Scheduling(EventHandler):
    """Awaits the engine from inside its calls: the scheduled timers."""

    def __init__(self) -> None:
        self.seen: list[list[float]] = []
        self.done = asyncio.Event()

    async def on_message(self, context: Context, message: Message) -> None:
        self.seen.append(await context.scheduled())
        self.done.set()

    async def on_excise(self, context: Context, message: ExciseMessage) -> None:
        pass

    async def on_timer(self, context: Context, timer: Timer) -> None:
        pass


async def a_round() -> None:
    """Awaitables that succeed, fail and are cancelled; a handler that
    awaits the engine."""
    client, topic = await mock_client()
    handler = Scheduling()
    client.subscribe(handler)
    await client.send(topic, "k", {"n": 1})
    await within(handler.done.wait())
    assert handler.seen == [[]]
    with pytest.raises(RuntimeError, match="topic name must not be empty"):
        await client.send("", "k", {})
    # A request nobody answers, cancelled while the engine waits.
    pending = asyncio.ensure_future(client.request(topic, "k", {}, subsystems="nobody", timeout=30.0))
    await asyncio.sleep(0)
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    await client.shutdown()


def test_no_engine_thread_calls_into_the_loop() -> None:
    loop = Watched()
    try:
        loop.run_until_complete(a_round())
    finally:
        loop.close()
    assert loop.foreign == [], f"engine threads called into the loop: {loop.foreign}"


def test_each_loop_gets_its_own_completions() -> None:
    # Two loops one after another, the first closed: the second's
    # awaitables still complete.
    for _ in range(2):
        loop = asyncio.new_event_loop()
        try:
            client, topic = loop.run_until_complete(mock_client(group_id=unique("group")))
            loop.run_until_complete(within(client.send(topic, "k", {})))
            loop.run_until_complete(within(client.shutdown()))
        finally:
            loop.close()


def test_a_closed_loop_whose_awaitable_completes_later_is_let_go() -> None:
    # An awaitable left behind on a loop that closed completes on the
    # engine afterwards: its outcome, queued for the closed loop, must not
    # keep that loop alive once another loop starts.
    first = asyncio.new_event_loop()
    client, topic = first.run_until_complete(mock_client())

    async def left_behind() -> None:
        # The send starts (its engine work with it) and is left pending.
        asyncio.ensure_future(client.send(topic, "k", {}))
        await asyncio.sleep(0)

    first.run_until_complete(left_behind())
    first.close()
    gone = weakref.ref(first)
    del first
    deadline = time.monotonic() + DEADLINE
    while gone() is not None and time.monotonic() < deadline:
        later = asyncio.new_event_loop()
        try:
            later.run_until_complete(within(client.excise(topic, "other")))
        finally:
            later.close()
        gc.collect()
    assert gone() is None, "a closed loop is held by an outcome queued for it"
    last = asyncio.new_event_loop()
    try:
        last.run_until_complete(within(client.shutdown()))
    finally:
        last.close()
