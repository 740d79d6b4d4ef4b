"""The client in mock mode: handlers, ordering, requests, errors,
cancellation, timers, keyed and published state, life cycle."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from prosody import (
    Context,
    EventHandler,
    ExciseMessage,
    Failure,
    HandlerError,
    Message,
    MessageValueDefinition,
    PermanentError,
    PermanentStateError,
    ProsodyClient,
    Success,
    Timeout,
    Timer,
    ValueDefinition,
    map,
    message_value,
    permanent,
    value,
)

from support import mock_client, unique, until, within


class Recorder(EventHandler):
    """Records what it sees; answers requests with the key."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.excised: list[str] = []
        self.timers: list[Timer] = []
        self.changed = asyncio.Event()

    async def on_message(self, context: Context, message: Message) -> Any:
        self.messages.append(message)
        self.changed.set()
        return {"accepted": message.key}

    async def on_excise(self, context: Context, message: ExciseMessage) -> Any:
        self.excised.append(message.key)
        self.changed.set()
        return None

    async def on_timer(self, context: Context, timer: Timer) -> None:
        self.timers.append(timer)
        self.changed.set()


async def test_each_key_sees_its_messages_in_send_order() -> None:
    client, topic = await mock_client()
    handler = Recorder()
    client.subscribe(handler)
    sent = [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)]
    for key, n in sent:
        await client.send(topic, key, {"n": n})
    await until(lambda: len(handler.messages) == len(sent))
    for key in ("a", "b"):
        seen = [m.payload["n"] for m in handler.messages if m.key == key]  # type: ignore[index, call-overload]
        assert seen == [n for k, n in sent if k == key]
    first = handler.messages[0]
    assert first.topic == topic and first.offset >= 0 and first.timestamp.tzinfo is not None
    await client.excise(topic, "a")
    await until(lambda: handler.excised == ["a"])
    await client.shutdown()


async def test_subscribe_can_be_awaited_and_reports_the_consumer() -> None:
    client, topic = await mock_client()
    assert await client.consumer_state() == "configured"
    await client.subscribe(Recorder())
    assert await client.consumer_state() == "running"
    await client.send(topic, "k", {})
    assert not await client.is_stalled()
    assert client.source_system.startswith("source-")
    await client.unsubscribe()
    assert await client.consumer_state() == "configured"
    assert await client.assigned_partition_count() == 0
    await client.shutdown()


async def test_a_handler_missing_a_method_is_refused_before_consuming() -> None:
    class Partial:
        async def on_message(self, context: Context, message: Message) -> None:
            pass

    client, _ = await mock_client()
    with pytest.raises(TypeError):
        client.subscribe(Partial())  # type: ignore[arg-type]
    assert await client.consumer_state() == "configured"
    await client.shutdown()


async def test_a_python_subsystem_answers_requests() -> None:
    client, topic = await mock_client(subsystem="inventory")
    client.subscribe(Recorder())
    results = await client.request(
        topic, "order-1", {"type": "order.created"},
        subsystems=["inventory"], timeout=timedelta(seconds=10),
    )
    assert results == {"inventory": Success({"accepted": "order-1"})}
    excised = await client.request_excise(topic, "order-1", subsystems=["inventory"], timeout=10.0)
    assert excised == {"inventory": Success(None)}
    await client.shutdown()


async def test_a_subsystem_that_does_not_answer_is_a_timeout() -> None:
    client, topic = await mock_client(subsystem="inventory")
    client.subscribe(Recorder())
    results = await client.request(topic, "k", {}, subsystems=["inventory", "billing"], timeout=5.0)
    assert isinstance(results["inventory"], Success)
    billing = results["billing"]
    assert isinstance(billing, Failure) and isinstance(billing.error, Timeout)
    assert billing.error.message == "no response arrived before the deadline"
    await client.shutdown()


class Rejecting(EventHandler):
    """Raises a permanent error for each message; a transient one for
    timers."""

    @permanent(ValueError)
    async def on_message(self, context: Context, message: Message) -> None:
        raise ValueError(f"order {message.key} is malformed")

    async def on_excise(self, context: Context, message: ExciseMessage) -> None:
        raise PermanentError("excise refused")

    async def on_timer(self, context: Context, timer: Timer) -> None:
        pass


async def test_a_permanent_exception_reaches_the_requester_with_its_type_and_message() -> None:
    client, topic = await mock_client(subsystem="orders")
    client.subscribe(Rejecting())
    results = await client.request(topic, "o-7", {}, subsystems=["orders"], timeout=10.0)
    outcome = results["orders"]
    assert isinstance(outcome, Failure) and isinstance(outcome.error, HandlerError)
    assert "ValueError" in outcome.error.message
    assert "order o-7 is malformed" in outcome.error.message
    excised = (await client.request_excise(topic, "o-8", subsystems=["orders"], timeout=10.0))["orders"]
    assert isinstance(excised, Failure) and "excise refused" in excised.error.message
    await client.shutdown()


async def test_a_timed_out_handler_is_cancelled_and_counts_as_failed() -> None:
    seen: list[bool] = []
    cancelled = asyncio.Event()

    class Slow(Recorder):
        async def on_message(self, context: Context, message: Message) -> None:
            try:
                await context.on_cancel()
                seen.append(context.should_cancel())
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()
                raise

    client, topic = await mock_client(timeout=0.5, mode="best-effort", subsystem="slow")
    client.subscribe(Slow())
    results = await client.request(topic, "slow", {}, subsystems=["slow"], timeout=10.0)
    await within(cancelled.wait())
    assert seen == [True]
    outcome = results["slow"]
    assert isinstance(outcome, Failure) and isinstance(outcome.error, HandlerError)
    await client.shutdown()


async def test_a_handler_that_blocks_the_loop_shows_as_a_stall_not_a_deadlock() -> None:
    stalled: list[bool] = []

    class Blocking(Recorder):
        async def on_message(self, context: Context, message: Message) -> None:
            if message.key == "block" and not stalled:
                time.sleep(5.5)  # blocks the event loop, deliberately
                stalled.append(client._native.is_stalled())
            await super().on_message(context, message)

    # Without deferral the timed-out record is retried in place, so the
    # partition makes no progress while the loop is blocked.
    client, topic = await mock_client(stall_threshold=4.0, timeout=0.9, defer_enabled=False)
    handler = Blocking()
    client.subscribe(handler)
    await client.send(topic, "block", {})
    for n in range(20):
        await client.send(topic, f"after-{n}", {})
    await until(lambda: {m.key for m in handler.messages} == {"block"} | {f"after-{n}" for n in range(20)})
    assert stalled == [True]
    await until(lambda: not client._native.is_stalled())
    await client.shutdown()


async def test_a_timer_fires_for_its_key() -> None:
    class Scheduling(Recorder):
        async def on_message(self, context: Context, message: Message) -> None:
            await context.schedule(datetime.now(timezone.utc) + timedelta(seconds=1))
            scheduled = await context.scheduled()
            assert len(scheduled) == 1 and scheduled[0].tzinfo is not None

    client, topic = await mock_client()
    handler = Scheduling()
    client.subscribe(handler)
    await client.send(topic, "t-1", {})
    await until(lambda: len(handler.timers) == 1)
    assert handler.timers[0].key == "t-1"
    await client.shutdown()


COUNTER: ValueDefinition[int] = value("counter", ttl=timedelta(days=30))


async def test_keyed_state_counts_per_key() -> None:
    counts: dict[str, int] = {}

    class Counting(Recorder):
        async def on_message(self, context: Context, message: Message) -> None:
            count = context.state(COUNTER)
            now = (await count.get() or 0) + 1
            await count.set(now)
            counts[message.key] = now

    client, topic = await mock_client(state_collections=[COUNTER])
    client.subscribe(Counting())
    for key in ["x", "y", "x", "x"]:
        await client.send(topic, key, {})
    await until(lambda: counts == {"x": 3, "y": 1})
    await client.shutdown()


async def test_published_state_reads_what_the_owner_wrote() -> None:
    current: ValueDefinition[dict[str, str]] = value(unique("current-order"), published=True, read_cache=False)
    written = asyncio.Event()

    class Owner(Recorder):
        async def on_message(self, context: Context, message: Message) -> None:
            await context.state(current).set({"sku": "book"})
            written.set()

    subsystem = unique("checkout")
    owner, topic = await mock_client(subsystem=subsystem, state_collections=[current])
    owner.subscribe(Owner())
    await owner.send(topic, "customer-123", {})
    await within(written.wait())
    reader = await owner.state(subsystem, current)

    async def read() -> Any:
        return await reader.get("customer-123")

    found: list[Any] = []

    async def check() -> None:
        while not found or found[-1] is None:
            found.append(await read())

    await within(check())
    assert found[-1] == {"sku": "book"}
    await owner.shutdown()


async def test_binding_an_unregistered_or_mismatched_definition_is_a_permanent_state_error() -> None:
    name = unique("x")
    registered: ValueDefinition[int] = value(name)
    refused: list[tuple[str, Exception]] = []
    read: list[int | None] = []

    class Binding(Recorder):
        async def on_message(self, context: Context, message: Message) -> None:
            for label, definition in (("unregistered", value(unique("absent"))), ("other kind", map(name))):
                try:
                    context.state(definition)  # raises here, before any operation
                except PermanentStateError as error:
                    refused.append((label, error))
            count = context.state(registered)
            await count.set(1)
            read.append(await count.get())
            await super().on_message(context, message)

    client, topic = await mock_client(state_collections=[registered])
    handler = Binding()
    client.subscribe(handler)
    await client.send(topic, "k", {})
    await until(lambda: len(handler.messages) == 1)
    assert [label for label, _ in refused] == ["unregistered", "other kind"]
    assert "is not registered in state_collections" in str(refused[0][1])
    assert f"{name} is registered as a value of json items, not a map of json items" in str(refused[1][1])
    assert read == [1]
    await client.shutdown()


async def test_a_copied_message_cannot_be_stored_but_the_received_one_can() -> None:
    last: MessageValueDefinition[Any] = message_value(unique("last"))
    refused: list[Exception] = []
    read: list[Message[Any] | None] = []

    class Storing(Recorder):
        async def on_message(self, context: Context, message: Message) -> None:
            stored = context.state(last)
            try:
                await stored.set(dataclasses.replace(message, payload={"n": 2}))
            except TypeError as error:
                refused.append(error)
            await stored.set(message)
            read.append(await stored.get())
            await super().on_message(context, message)

    client, topic = await mock_client(state_collections=[last])
    handler = Storing()
    client.subscribe(handler)
    await client.send(topic, "k", {"n": 1})
    await until(lambda: len(handler.messages) == 1)
    assert len(refused) == 1 and "received from Prosody" in str(refused[0])
    received, found = handler.messages[0], read[0]
    assert found is not None
    assert (found.key, found.offset, found.payload) == ("k", received.offset, {"n": 1})
    await client.shutdown()


@pytest.mark.parametrize("read_cache", [5, timedelta(seconds=5), False], ids=["seconds", "timedelta", "false"])
async def test_state_read_cache_takes_seconds_a_timedelta_or_false(read_cache: Any) -> None:
    client = await ProsodyClient.create(
        mock=True, group_id=unique("group"), probe_port=None, state_read_cache=read_cache
    )
    await client.shutdown()


async def test_no_state_collections_is_accepted_and_registers_none() -> None:
    refused: list[Exception] = []

    class Binding(Recorder):
        async def on_message(self, context: Context, message: Message) -> None:
            try:
                context.state(COUNTER)
            except PermanentStateError as error:
                refused.append(error)
            await super().on_message(context, message)

    client, topic = await mock_client(state_collections=None)
    handler = Binding()
    client.subscribe(handler)
    await client.send(topic, "k", {})
    await until(lambda: len(handler.messages) == 1)
    assert len(refused) == 1 and "not registered" in str(refused[0])
    await client.shutdown()


@pytest.mark.parametrize(
    ("option", "given"), [("group_id", ["a", "b"]), ("state_read_cache", True)], ids=["group_id", "state_read_cache"]
)
async def test_a_list_or_flag_where_neither_fits_is_a_value_error_naming_the_option(option: str, given: Any) -> None:
    config: dict[str, Any] = {"mock": True, "group_id": "g", "probe_port": None, option: given}
    with pytest.raises(ValueError, match=option):
        await ProsodyClient.create(**config)


async def test_an_unknown_option_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="max_concurency"):
        await ProsodyClient.create(mock=True, group_id="g", max_concurency=4)


@pytest.mark.parametrize(
    ("option", "given", "shown"),
    [("max_concurrency", "lots", "lots"), ("timeout", -1, "-1"), ("mode", "fastest", "fastest")],
)
async def test_a_bad_value_is_a_value_error_naming_the_option_and_the_value(option: str, given: Any, shown: str) -> None:
    with pytest.raises(ValueError) as raised:
        await ProsodyClient.create(mock=True, group_id="g", **{option: given})
    assert option in str(raised.value) and shown in str(raised.value)


async def test_an_idempotence_cache_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="idempotence_cache_size"):
        await ProsodyClient.create(mock=True, group_id="g", idempotence_cache_size=0)


async def test_shutdown_is_one_operation_however_often_it_is_called() -> None:
    client, topic = await mock_client()
    client.subscribe(Recorder())
    await asyncio.gather(client.shutdown(), client.shutdown(), client.shutdown())
    await client.shutdown()
    with pytest.raises(RuntimeError):
        await client.send(topic, "k", {})


class Waiting(Recorder):
    """Waits in its first call until the engine cancels it, then fails
    (so the record is not taken as handled)."""

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()
        self.cancelled: list[str] = []

    async def on_message(self, context: Context, message: Message) -> Any:
        if message.key == "wait" and not self.cancelled:
            self.started.set()
            await context.on_cancel()
            self.cancelled.append(message.key)
            raise RuntimeError("stopping: the engine asked")
        return await super().on_message(context, message)


async def test_shutdown_signals_cancellation_to_a_call_in_flight() -> None:
    client, topic = await mock_client(shutdown_timeout=2.0)
    handler = Waiting()
    client.subscribe(handler)
    await client.send(topic, "wait", {})
    await within(handler.started.wait())
    await within(client.shutdown())
    assert handler.cancelled == ["wait"]


async def test_a_rebalance_signals_cancellation_and_the_next_owner_handles_the_record() -> None:
    group = unique("group")
    first, topic = await mock_client(group_id=group)
    handler = Waiting()
    first.subscribe(handler)
    await first.send(topic, "wait", {})
    await within(handler.started.wait())
    # A second member joins the group, then the first leaves it: its
    # partitions move, and the call in flight is told to stop.
    second, _ = await mock_client(group_id=group, subscribed_topics=topic)
    taker = Recorder()
    second.subscribe(taker)
    await within(first.unsubscribe())
    assert handler.cancelled == ["wait"]
    await until(lambda: "wait" in [m.key for m in taker.messages])
    await second.shutdown()
    await first.shutdown()
