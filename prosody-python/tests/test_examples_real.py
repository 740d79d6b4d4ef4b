"""The README's Python examples that name a Kafka at localhost:9092 (and a
Cassandra at localhost:9042), run unchanged against the real servers.

The servers of `scripts/services` listen on other ports, so the test
forwards localhost:9092 and localhost:9042 to them for the duration; a
Kafka client bootstraps through the forward and then reaches the broker
it advertises directly."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from prosody import AdminClient, Context, EventHandler, ExciseMessage, Message, Timer

from test_examples import HERE, REAL_ONLY, index, namespace, run
from support import until, within
from test_real import servers

#: The README examples that name the servers, by line (the one at line
#: 885 has a test of its own: it runs until a signal).
NAMING_SERVERS = {79, 568, 579} | set(REAL_ONLY)
SIGNALLED = 885


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


@asynccontextmanager
async def forwarded(port: int, target: str) -> AsyncIterator[None]:
    """localhost:`port` forwarded to `target` (`host:port`)."""
    host, _, target_port = target.split(",")[0].rpartition(":")

    async def connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(target_port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(connect, "localhost", port)
    try:
        yield
    finally:
        server.close()


def test_every_example_naming_the_servers_is_run_here() -> None:
    named = {e["line"] for e in index() if "localhost:9" in (HERE / e["file"]).read_text()}
    assert named == NAMING_SERVERS | {SIGNALLED}


@pytest.mark.parametrize(
    "entry", [e for e in index() if e["line"] in NAMING_SERVERS], ids=lambda e: f"line-{e['line']}"
)
async def test_the_example_runs_unchanged_on_the_real_servers(
    entry: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    servers()
    monkeypatch.delenv("PROSODY_MOCK", raising=False)
    monkeypatch.setenv("PROSODY_PROBE_PORT", "none")
    admin = AdminClient()
    try:
        await admin.create_topic("my-topic", partition_count=1, replication_factor=1)
    except RuntimeError as error:
        assert "already exists" in str(error).lower() or "exists" in str(error).lower(), error
    async with forwarded(9092, os.environ["PROSODY_BOOTSTRAP_SERVERS"]):
        async with forwarded(9042, os.environ["PROSODY_CASSANDRA_NODES"]):
            await run(entry, seconds=90)


class MyHandler(EventHandler):
    """The handler the README defines in its quick start."""

    async def on_message(self, context: Context, message: Message) -> None:
        pass

    async def on_excise(self, context: Context, message: ExciseMessage) -> None:
        pass

    async def on_timer(self, context: Context, timer: Timer) -> None:
        pass


async def test_the_shutdown_example_stops_its_client_on_sigterm(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Line 885: its `main` subscribes and waits for a signal; SIGTERM
    shuts the client down and `main` returns."""
    servers()
    monkeypatch.delenv("PROSODY_MOCK", raising=False)
    monkeypatch.setenv("PROSODY_PROBE_PORT", "none")
    [entry] = [e for e in index() if e["line"] == SIGNALLED]
    source = (HERE / entry["file"]).read_text()
    names = namespace(source)
    names["MyHandler"] = MyHandler
    exec(compile(source, entry["file"], "exec"), names)
    loop = asyncio.get_running_loop()
    admin = AdminClient()
    try:
        await admin.create_topic("my-topic", partition_count=1, replication_factor=1)
    except RuntimeError as error:
        assert "exists" in str(error).lower(), error
    try:
        async with forwarded(9092, os.environ["PROSODY_BOOTSTRAP_SERVERS"]):
            running = asyncio.ensure_future(names["main"]())
            # Its signal handlers are in place once SIGTERM no longer has
            # the default disposition.
            await until(lambda: signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, 60)
            os.kill(os.getpid(), signal.SIGTERM)
            await within(running, 90)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
    assert "Received signal SIGTERM. Client shutdown starts." in capsys.readouterr().out
