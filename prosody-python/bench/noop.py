"""Records per second through a no-op Python handler and through the
no-op Rust handler, same process, same client configuration, same stack
(mock mode, pipeline mode), and the cost per Python handler call.

    .venv-python/bin/python prosody-python/bench/noop.py [records]
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from typing import Any, Callable

from prosody import Context, EventHandler, ExciseMessage, Message, ProsodyClient, Timer


class Noop(EventHandler):
    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0

    async def on_message(self, context: Context, message: Message) -> None:
        self.calls += 1

    async def on_excise(self, context: Context, message: ExciseMessage) -> None:
        self.calls += 1

    async def on_timer(self, context: Context, timer: Timer) -> None:
        pass


async def one(records: int, keys: int, python: bool) -> float:
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    client = await ProsodyClient.create(
        mock=True, group_id=f"g-{topic}", source_system=f"s-{topic}",
        subscribed_topics=topic, probe_port=None, max_concurrency=64,
    )
    for n in range(records):
        await client.send(topic, f"k{n % keys}", {"n": n})
    handler = Noop()
    counted: Callable[[], int]
    started = time.perf_counter()
    if python:
        client.subscribe(handler)
        counted = lambda: handler.calls  # noqa: E731
    else:
        calls: Any = client._native.subscribe_noop()
        counted = calls.count
    while counted() < records:
        await asyncio.sleep(0.001)
    elapsed = time.perf_counter() - started
    await client.shutdown()
    return records / elapsed


async def main() -> None:
    records = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    await one(2_000, 100, True)  # warm-up
    for keys in (1000,):
        rust = await one(records, keys, False)
        python = await one(records, keys, True)
        cost = (1 / python - 1 / rust) * 1e6
        print(f"{records} records, {keys} keys: Rust no-op {rust:,.0f}/s, "
              f"Python no-op {python:,.0f}/s; a Python call costs {cost:.1f} µs more")


asyncio.run(main())
