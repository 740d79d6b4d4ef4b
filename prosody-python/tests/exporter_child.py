"""A process whose client handles one record in mock mode and then
flushes its telemetry: run by `test_tracing.py` with an OTLP endpoint in
its environment, and no telemetry call but the flush."""

from __future__ import annotations

import asyncio

from prosody import Context, EventHandler, ExciseMessage, Message, ProsodyClient, Timer, flush_telemetry


class Once(EventHandler):
    def __init__(self) -> None:
        self.handled = asyncio.Event()

    async def on_message(self, context: Context, message: Message) -> None:
        self.handled.set()

    async def on_excise(self, context: Context, message: ExciseMessage) -> None:
        pass

    async def on_timer(self, context: Context, timer: Timer) -> None:
        pass


async def main() -> None:
    client = await ProsodyClient.create(
        mock=True, group_id="exported", source_system="exporter", subscribed_topics="exported",
        probe_port=None,
    )
    handler = Once()
    client.subscribe(handler)
    await client.send("exported", "key", {"n": 1})
    await asyncio.wait_for(handler.handled.wait(), 30)
    await client.shutdown()
    flush_telemetry()


asyncio.run(main())
