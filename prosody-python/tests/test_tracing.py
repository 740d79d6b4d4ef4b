"""Traces continue from the engine into Python: a span a handler opens is
a child of the engine's span for that record."""

from __future__ import annotations

import asyncio

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from prosody import Context, EventHandler, ExciseMessage, Message, Timer

from support import mock_client, within

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer(__name__)


async def test_a_handler_span_is_a_child_of_the_engine_span() -> None:
    done = asyncio.Event()

    class Traced(EventHandler):
        async def on_message(self, context: Context, message: Message) -> None:
            with tracer.start_as_current_span("test-receive"):
                pass
            done.set()

        async def on_excise(self, context: Context, message: ExciseMessage) -> None:
            pass

        async def on_timer(self, context: Context, timer: Timer) -> None:
            pass

    client, topic = await mock_client()
    client.subscribe(Traced())
    await client.send(topic, "traced", {})
    await within(done.wait())
    await client.shutdown()
    [span] = [s for s in exporter.get_finished_spans() if s.name == "test-receive"]
    assert span.parent is not None and span.parent.is_remote
    assert span.parent.trace_id == span.context.trace_id


def test_telemetry_can_be_flushed_and_shut_down_without_an_endpoint() -> None:
    from prosody import flush_telemetry, shutdown_telemetry

    assert flush_telemetry() is None
    assert shutdown_telemetry() is None


def test_spans_are_exported_when_an_endpoint_is_set() -> None:
    """With `OTEL_EXPORTER_OTLP_ENDPOINT` set, the engine's spans reach an
    OTLP receiver (HTTP, protobuf) with no telemetry set-up by the
    application, whatever `PROSODY_LOG` keeps of the log lines."""
    import os
    import subprocess
    import sys
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from pathlib import Path

    received: list[tuple[str, int]] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the server's name for it
            length = int(self.headers.get("Content-Length", "0"))
            received.append((self.path, len(self.rfile.read(length))))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        env = dict(
            os.environ,
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{server.server_port}",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_METRICS_EXPORTER="none",
            # The filter of the engine's log lines leaves its spans alone.
            PROSODY_LOG="warn",
        )
        child = Path(__file__).parent / "exporter_child.py"
        ran = subprocess.run([sys.executable, str(child)], env=env, capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, ran.stderr
    finally:
        server.shutdown()
    traces = [size for path, size in received if path == "/v1/traces"]
    assert traces and sum(traces) > 0, received
