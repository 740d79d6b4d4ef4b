"""Keyed state from Python in mock mode: maps, deques and message
collections in a handler, read in chunks; published maps and deques read
from another client."""

from __future__ import annotations

import asyncio
from typing import Any

from prosody import (
    Context,
    DequeDefinition,
    Direction,
    EventHandler,
    ExciseMessage,
    MapDefinition,
    Message,
    MessageDequeDefinition,
    NullValueError,
    Timer,
    deque,
    map,
    message_deque,
)

from support import mock_client, unique, until, within

ITEMS: MapDefinition[int] = map("items", published=True, read_cache=False)
LOG: DequeDefinition[str] = deque("log", capacity=500, published=True, read_cache=False)
SEEN: MessageDequeDefinition[Any] = message_deque("seen", capacity=10)


class Stateful(EventHandler):
    def __init__(self) -> None:
        self.views: dict[str, Any] = {}
        self.done = asyncio.Event()

    async def on_message(self, context: Context, message: Message) -> None:
        items, log, seen = context.state(ITEMS), context.state(LOG), context.state(SEEN)
        payload: Any = message.payload
        if payload.get("fill"):
            for n in range(300):
                await items.set(f"k{n:03}", n)
                await log.append(f"e{n}")
            await log.appendleft("first")
            await seen.append(message)
            return
        await seen.append(message)
        self.views = {
            "get": await items.get("k007"),
            "default": await items.get("absent", -1),
            "many": await items.get_many(["k001", "absent"]),
            "contains": await items.contains("k299"),
            "keys": [k async for k in items.keys()],
            "backward": [k async for k in items.keys(Direction.BACKWARD)][:2],
            "aiter": [k async for k in items][:2],
            "items": [kv async for kv in items.items()][:2],
            "values": [v async for v in items.values()][-1],
            "size": await log.size(),
            "peekleft": await log.peekleft(),
            "peek": await log.peek(),
            "at": await log.get(1),
            "log": [v async for v in log.values()],
            "seen": [m.payload async for m in seen.values()],
        }
        try:
            await items.set("none", None)  # type: ignore[arg-type]
        except NullValueError:
            self.views["null"] = "refused"
        await items.remove("k000")
        self.views["removed"] = await items.contains("k000")
        self.done.set()

    async def on_excise(self, context: Context, message: ExciseMessage) -> None:
        pass

    async def on_timer(self, context: Context, timer: Timer) -> None:
        pass


async def test_maps_deques_and_message_deques_in_a_handler_and_published() -> None:
    subsystem = unique("stateful")
    client, topic = await mock_client(subsystem=subsystem, state_collections=[ITEMS, LOG, SEEN])
    handler = Stateful()
    client.subscribe(handler)
    await client.send(topic, "key", {"fill": True})
    await client.send(topic, "key", {"read": True})
    await within(handler.done.wait())
    views = handler.views
    assert views["get"] == 7 and views["default"] == -1 and views["many"] == [1, None]
    assert views["contains"] is True and len(views["keys"]) == 300
    assert views["keys"][:2] == ["k000", "k001"] and views["backward"] == ["k299", "k298"]
    assert views["aiter"] == ["k000", "k001"] and views["items"] == [("k000", 0), ("k001", 1)]
    assert views["values"] == 299
    assert views["size"] == 301 and views["peekleft"] == "first" and views["peek"] == "e299"
    assert views["at"] == "e0" and views["log"][:2] == ["first", "e0"] and len(views["log"]) == 301
    assert views["seen"] == [{"fill": True}, {"read": True}]
    assert views["null"] == "refused" and views["removed"] is False

    items = await client.state(subsystem, ITEMS)
    log = await client.state(subsystem, LOG)
    keys: list[str] = []

    async def read() -> None:
        while len(keys) != 299:
            keys[:] = [k async for k in items.keys("key")]

    await within(read())
    assert keys[0] == "k001"
    assert [kv async for kv in items.items("key", Direction.BACKWARD)][0] == ("k299", 299)
    assert await items.get("key", "k010") == 10 and await items.contains("key", "k000") is False
    assert await log.size("key") == 301 and await log.peekleft("key") == "first"
    assert [v async for v in log.values("key", Direction.BACKWARD)][:2] == ["e299", "e298"]
    await client.shutdown()
