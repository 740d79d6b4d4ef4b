"""The README's Python examples, extracted verbatim from the seed
(`scripts/python extract`), run unchanged in mock mode.

A snippet that uses names the README imports elsewhere (`ProsodyClient`,
`datetime`, ...) gets them, as the reader would; nothing of its text
changes. The few that cannot run are listed with the exception type and
message fragment they fail with and the reason, and the list is checked
both ways: a listed example that starts to run, or fails otherwise, fails
the suite as much as an unlisted one that stops."""

from __future__ import annotations

import asyncio
import datetime as datetime_module
import json
import os
import pathlib
import re
import subprocess
import sys
from typing import Any, NamedTuple

import pytest

import prosody

HERE = pathlib.Path(__file__).parent / "examples"

class Expected(NamedTuple):
    """How an example that cannot run fails: exactly this exception type,
    with this fragment in its message."""

    error: type[Exception]
    fragment: str
    reason: str


#: The examples that cannot run unchanged here, how they fail, and why.
CANNOT_RUN: dict[int, Expected] = {
    475: Expected(
        ValueError, "idempotence_cache_size",
        "it shows a configuration the README says is rejected (idempotence_cache_size=0)",
    ),
    634: Expected(
        NameError, "'Activity'",
        "it names `Activity` and `notify`, which the README defines only in a file it links to",
    ),
    716: Expected(
        NameError, "'config'",
        "it mixes client set-up with handler code (`config`, `context`) as one fragment",
    ),
    733: Expected(
        NameError, "'CURRENT_ORDER'",
        "it reads `CURRENT_ORDER`, defined by the fragment at line 716",
    ),
    1109: Expected(
        NameError, "'TypeVar'",
        "it is the declaration of `EventHandler` itself, with its imports left out",
    ),
}


#: The examples that administer a real Kafka: they run only against the
#: real servers (`test_examples_real.py`).
REAL_ONLY: dict[int, str] = {
    1025: "it creates and deletes a topic on the Kafka at localhost:9092",
}


def index() -> list[dict[str, Any]]:
    return list(json.loads((HERE / "index.json").read_text()))


def namespace(source: str) -> dict[str, Any]:
    """The names the README's examples take from elsewhere: the package's,
    and `datetime` as the module where the text uses it so (lines 82, 511
    and 1025: `datetime.datetime`, `datetime.timedelta`), else as the class
    (line 653)."""
    names: dict[str, Any] = {name: getattr(prosody, name) for name in prosody.__all__}
    as_module = "datetime.datetime" in source or "datetime.timedelta" in source
    names.update(
        asyncio=asyncio,
        datetime=datetime_module if as_module else datetime_module.datetime,
        timedelta=datetime_module.timedelta,
        timezone=datetime_module.timezone,
        __name__="example",
    )
    return names


async def run(entry: dict[str, Any], seconds: float = 20) -> None:
    source = (HERE / entry["file"]).read_text()
    names = namespace(source)
    # The `client` of the snippets that use one made earlier.
    client = await prosody.ProsodyClient.create(group_id="examples", probe_port=None)
    names["client"] = client
    try:
        exec(compile(source, entry["file"], "exec"), names)
        main = names.get("main")
        if entry.get("wrapped") and main is not None:
            await asyncio.wait_for(main(), seconds)
    finally:
        await client.shutdown()


@pytest.mark.parametrize(
    "entry", [e for e in index() if e["line"] not in REAL_ONLY], ids=lambda e: f"line-{e['line']}"
)
async def test_the_example_runs_unchanged(entry: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROSODY_MOCK", "true")
    monkeypatch.setenv("PROSODY_PROBE_PORT", "none")
    expected = CANNOT_RUN.get(entry["line"])
    if expected is None:
        await run(entry)
        return
    with pytest.raises(Exception) as raised:
        await run(entry)
    assert type(raised.value) is expected.error, (
        f"expected {expected.error.__name__} ({expected.reason}), got {raised.value!r}"
    )
    assert expected.fragment in str(raised.value), (
        f"expected {expected.fragment!r} in the message ({expected.reason}), got {raised.value!r}"
    )


def test_the_binding_readme_example_runs(tmp_path: pathlib.Path) -> None:
    """The example of `prosody-python/README.md` runs as a script and
    prints what its handler received."""
    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    [example] = re.findall(r"```python\n(.*?)```", readme, re.S)
    script = tmp_path / "example.py"
    script.write_text(example)
    ran = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PROSODY_LOG": "warn"},
    )
    assert ran.returncode == 0, ran.stderr
    assert "world {'text': 'hello'}" in ran.stdout
