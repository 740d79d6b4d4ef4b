"""A member of a consumer group on real Kafka and Cassandra, run as its
own process by `test_real.py`: it reports what it handles as JSON lines
on standard output.

    python member.py NAME TOPIC GROUP KEYSPACE

Member `a` fails every record whose payload has `"fail": true`; the
others handle it. A payload with `"timer_in": s` schedules a timer `s`
seconds ahead."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime, timedelta, timezone
from typing import Any

from prosody import Context, EventHandler, ExciseMessage, Message, ProsodyClient, Timer, TransientError

NAME, TOPIC, GROUP, KEYSPACE = sys.argv[1:5]


def report(event: str, key: str, n: Any = None) -> None:
    print(json.dumps({"member": NAME, "event": event, "key": key, "n": n}), flush=True)


class Member(EventHandler):
    async def on_message(self, context: Context, message: Message) -> None:
        payload: Any = message.payload
        if payload.get("fail") and NAME == "a":
            report("failed", message.key, payload["n"])
            raise TransientError(f"member {NAME} fails it")
        if payload.get("timer_in"):
            at = datetime.now(timezone.utc) + timedelta(seconds=payload["timer_in"])
            await context.schedule(at)
        report("message", message.key, payload["n"])

    async def on_timer(self, context: Context, timer: Timer) -> None:
        report("timer", timer.key)

    async def on_excise(self, context: Context, message: ExciseMessage) -> None:
        pass


async def main() -> None:
    client = await ProsodyClient.create(
        group_id=GROUP,
        subscribed_topics=TOPIC,
        cassandra_keyspace=KEYSPACE,
        source_system="producer",
        defer_base=1.0,
        probe_port=None,
        group_protocol="consumer",
    )
    client.subscribe(Member())
    report("ready", "")
    await asyncio.Event().wait()


asyncio.run(main())
