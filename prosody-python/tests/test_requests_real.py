"""Requests between a Python process and a Rust process on the real Kafka
(`examples/subsystem.rs` is the Rust side): a Python subsystem answers a
Rust caller, and a Rust subsystem answers a Python caller."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from prosody import AdminClient, Context, EventHandler, ExciseMessage, Message, ProsodyClient, Success, Timer

from support import unique, within
from test_real import servers

KEYSPACE = "prosody_python"
EXAMPLE = Path(__file__).parents[2] / "target" / "debug" / "examples" / "subsystem"


async def rust(*args: str, stdin: int | None = None) -> asyncio.subprocess.Process:
    assert EXAMPLE.exists(), f"{EXAMPLE} is missing: cargo build --example subsystem"
    # The peer directory is in the keyspace: both sides share one.
    env = dict(os.environ, PROSODY_LOG="warn", PROSODY_CASSANDRA_KEYSPACE=KEYSPACE)
    return await asyncio.create_subprocess_exec(
        str(EXAMPLE), *args, stdin=stdin, stdout=asyncio.subprocess.PIPE, env=env,
    )


class Answering(EventHandler):
    async def on_message(self, context: Context, message: Message) -> Any:
        return {"answered_by": "python", "key": message.key, "asked": message.payload}

    async def on_excise(self, context: Context, message: ExciseMessage) -> Any:
        return None

    async def on_timer(self, context: Context, timer: Timer) -> None:
        pass


async def test_a_python_subsystem_answers_a_rust_caller() -> None:
    servers()
    topic, name = unique("py_answers"), unique("py_billing")
    admin = AdminClient()
    await admin.create_topic(topic, partition_count=1, replication_factor=1)
    client = await ProsodyClient.create(
        group_id=name, subsystem=name, source_system=f"{name}-answers",
        subscribed_topics=topic, probe_port=None, cassandra_keyspace=KEYSPACE,
    )
    try:
        client.subscribe(Answering())
        asker = await rust("ask", name, topic, "order-1")
        out, _ = await within(asker.communicate(), 60)
        assert asker.returncode == 0
        line = json.loads(out.decode().strip().splitlines()[-1])
        assert line == {"success": {"answered_by": "python", "key": "order-1", "asked": {"asked_by": "rust"}}}
    finally:
        await client.shutdown()
        await admin.delete_topic(topic)


async def test_a_rust_subsystem_answers_a_python_caller() -> None:
    servers()
    topic, name = unique("rust_answers"), unique("rust_inventory")
    admin = AdminClient()
    await admin.create_topic(topic, partition_count=1, replication_factor=1)
    answerer = await rust("answer", name, topic, stdin=asyncio.subprocess.PIPE)
    client = await ProsodyClient.create(group_id=unique("py_asker"), probe_port=None, cassandra_keyspace=KEYSPACE)
    try:
        assert answerer.stdout is not None
        ready = await within(answerer.stdout.readline(), 60)
        assert ready.strip() == b"ready"
        results = await client.request(topic, "order-2", {"asked_by": "python"}, subsystems=[name], timeout=30.0)
        assert results == {name: Success({"answered_by": "rust", "key": "order-2"})}
    finally:
        await client.shutdown()
        if answerer.stdin is not None:
            answerer.stdin.close()
        await within(answerer.wait(), 60)
        await admin.delete_topic(topic)
