"""The README's Python examples, extracted verbatim from the seed
(`scripts/python extract`), run unchanged in mock mode.

A snippet that uses names the README imports elsewhere (`ProsodyClient`,
`datetime`, ...) gets them, as the reader would; nothing of its text
changes. The few that cannot run are listed with the reason, and the list
is checked both ways: a listed example that starts to run fails the suite
as much as an unlisted one that stops."""

from __future__ import annotations

import asyncio
import datetime as datetime_module
import json
import pathlib
from typing import Any

import pytest

import prosody

HERE = pathlib.Path(__file__).parent / "examples"

#: The examples that cannot run unchanged here, and why.
CANNOT_RUN: dict[int, str] = {
    475: "it shows a configuration the README says is rejected (idempotence_cache_size=0)",
    634: "it names `Activity` and `notify`, which the README defines only in a file it links to",
    716: "it mixes client set-up with handler code (`config`, `context`) as one fragment",
    733: "it reads `CURRENT_ORDER`, defined by the fragment at line 716",
    1025: "it creates topics on a Kafka at localhost:9092 (the test servers listen elsewhere)",
    1109: "it is the declaration of `EventHandler` itself, with its imports left out",
}


def index() -> list[dict[str, Any]]:
    return list(json.loads((HERE / "index.json").read_text()))


def namespace() -> dict[str, Any]:
    names: dict[str, Any] = {name: getattr(prosody, name) for name in prosody.__all__}
    names.update(
        asyncio=asyncio,
        datetime=datetime_module.datetime,
        timedelta=datetime_module.timedelta,
        timezone=datetime_module.timezone,
        __name__="example",
    )
    return names


async def run(entry: dict[str, Any]) -> None:
    source = (HERE / entry["file"]).read_text()
    names = namespace()
    # The `client` of the snippets that use one made earlier.
    client = await prosody.ProsodyClient.create(group_id="examples", probe_port=None)
    names["client"] = client
    try:
        exec(compile(source, entry["file"], "exec"), names)
        main = names.get("main")
        if entry.get("wrapped") and main is not None:
            await asyncio.wait_for(main(), 20)
    finally:
        await client.shutdown()


@pytest.mark.parametrize("entry", index(), ids=lambda e: f"line-{e['line']}")
async def test_the_example_runs_unchanged(entry: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROSODY_MOCK", "true")
    monkeypatch.setenv("PROSODY_PROBE_PORT", "none")
    reason = CANNOT_RUN.get(entry["line"])
    if reason is None:
        await run(entry)
        return
    with pytest.raises(Exception):
        await run(entry)
