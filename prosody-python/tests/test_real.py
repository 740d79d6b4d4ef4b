"""The binding on the real Kafka and Cassandra (`scripts/services`): a
Python member killed with SIGKILL loses nothing, a deferred record and a
timer survive to its successor."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from prosody import AdminClient, ProsodyClient

from support import unique, until

MEMBER = Path(__file__).parent / "member.py"

#: How far ahead member a schedules the timer: past the wait before the kill
#: on an ordinary run (the test checks it, failing if a fired it).
TIMER_IN = 30


def servers() -> None:
    """Skips (saying so on one line) when the servers are absent; fails
    when `PROSODY_REQUIRE_SERVICES=true`."""
    missing = [v for v in ("PROSODY_BOOTSTRAP_SERVERS", "PROSODY_CASSANDRA_NODES") if not os.environ.get(v)]
    if not missing:
        return
    line = f"test_real: did not run: {', '.join(missing)} not set (scripts/services start; eval \"$(scripts/services env)\")"
    if os.environ.get("PROSODY_REQUIRE_SERVICES") == "true":
        pytest.fail(line)
    print(line, file=sys.stderr)
    pytest.skip(line)


class Member:
    """A member process and the events it reported."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.seen: list[dict[str, Any]] = []
        self.reading = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, name: str, topic: str, group: str, keyspace: str) -> Member:
        env = dict(os.environ, PROSODY_LOG="warn")
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(MEMBER), name, topic, group, keyspace,
            stdout=asyncio.subprocess.PIPE, env=env,
        )
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            if line.startswith(b'{"member"'):
                self.seen.append(json.loads(line))

    def handled(self, event: str) -> list[Any]:
        return [e["n"] if e["n"] is not None else e["key"] for e in self.seen if e["event"] == event]

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()
        self.reading.cancel()


async def test_a_killed_python_member_loses_no_deferred_record_and_no_timer() -> None:
    servers()
    topic, group, keyspace = unique("py_killed"), unique("py_killed_group"), unique("py_killed").replace("-", "_")
    admin = AdminClient()
    await admin.create_topic(topic, partition_count=2, replication_factor=1)
    producer = await ProsodyClient.create(
        group_id=unique("producer"), source_system="producer", probe_port=None,
        cassandra_keyspace=keyspace,
    )
    a = await Member.start("a", topic, group, keyspace)
    b: Member | None = None
    try:
        await until(lambda: a.handled("ready") != [], 60)
        await producer.send(topic, "k1", {"n": 1, "fail": True})
        scheduled = time.monotonic()
        await producer.send(topic, "k2", {"n": 2, "timer_in": TIMER_IN})
        for n in range(3, 7):
            await producer.send(topic, f"k{n}", {"n": n})
        # The deferred record was retried once: its deferral is stored.
        await until(lambda: a.handled("failed").count(1) >= 2 and set(a.handled("message")) >= {2, 3, 4, 5, 6}, 60)
        a.kill()
        killed = time.monotonic() - scheduled
        await a.process.wait()
        await asyncio.wait_for(a.reading, 10)  # everything a wrote is read
        if a.handled("timer"):
            pytest.fail(
                f"precondition not met: member a fired the timer before the kill "
                f"(killed {killed:.1f} s after sending the record that schedules it {TIMER_IN} s ahead)"
            )
        b = await Member.start("b", topic, group, keyspace)
        # The timer fires in the successor whether it fell due before the
        # kill or after it.
        try:
            await until(lambda: 1 in b.handled("message") and "k2" in b.handled("timer"), 90)
        except asyncio.TimeoutError:
            pytest.fail(
                f"the successor did not handle the deferred record and fire the timer within 90 s "
                f"(a killed {killed:.1f} s after the timer's record was sent; b handled {b.handled('message')}, "
                f"fired {b.handled('timer')})"
            )
    finally:
        await a.stop()
        if b is not None:
            await b.stop()
        await producer.shutdown()
        await admin.delete_topic(topic)
