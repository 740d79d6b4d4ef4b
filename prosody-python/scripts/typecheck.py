#!/usr/bin/env python3
"""Type-check every README example with plain `mypy --strict`, holding the
errors to the list of the README's own faults.

Checks each tests/examples/typed_NN.py (written by extract.py) with the
package's mypy configuration and `--strict`, nothing relaxed. Each error is
mapped back to its README line. The check fails when

- an error is not listed in tests/examples_faults.json under its README line
  and code,
- a listed (line, code) no longer occurs,
- an error falls outside the README's text (a preamble line, the inserted
  `async def main()`, another file), or mypy itself fails.

The faults file maps a README line to {"codes": [...], "reason": "..."}.
Each listed fault is printed with its reason.

Run from anywhere with the environment's Python; `--cache-dir` goes to mypy.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent.parent
README = PACKAGE / "seed" / "README.md"
EXAMPLES = PACKAGE / "tests" / "examples"
FAULTS = PACKAGE / "tests" / "examples_faults.json"


def readme_line(entry: dict[str, Any], line: int) -> int | None:
    """The README line a typed-copy line holds, or None for added lines."""
    body: int = entry["typed_body_line"]
    main: int | None = entry["main_line"]
    if line < body or line == main:
        return None
    fence: int = entry["line"]
    if main is not None and line > main:
        return fence + line - body
    return fence + 1 + line - body


def load_faults() -> dict[int, tuple[set[str], str]]:
    faults: dict[int, tuple[set[str], str]] = {}
    for key, fault in json.loads(FAULTS.read_text(encoding="utf-8")).items():
        codes, reason = fault.get("codes"), fault.get("reason")
        if not (
            key.isdigit()
            and isinstance(codes, list)
            and codes
            and all(isinstance(code, str) for code in codes)
            and isinstance(reason, str)
            and reason
        ):
            raise SystemExit(f"{FAULTS.name}: {key!r} needs a README line, codes and a reason")
        faults[int(key)] = (set(codes), reason)
    return faults


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", help="mypy's cache directory")
    args = parser.parse_args()

    index: list[dict[str, Any]] = json.loads((EXAMPLES / "index.json").read_text())
    if any("typed" not in entry for entry in index):
        raise SystemExit("index.json has no typed copies: run scripts/extract.py")
    by_file = {(EXAMPLES / entry["typed"]).resolve(): entry for entry in index}
    readme = README.read_text(encoding="utf-8").splitlines()
    faults = load_faults()

    command = [
        sys.executable, "-m", "mypy",
        "--config-file", str(PACKAGE / "pyproject.toml"),
        "--strict",
        "--output", "json",
    ]
    if args.cache_dir:
        command += ["--cache-dir", args.cache_dir]
    command += [str(path) for path in by_file]
    run = subprocess.run(command, cwd=PACKAGE, capture_output=True, text=True)

    problems: list[str] = []
    # (README line, code) -> mypy's messages there
    found: dict[tuple[int, str], list[str]] = {}
    errors = 0
    for raw in run.stdout.splitlines():
        try:
            error = json.loads(raw)
        except json.JSONDecodeError:
            problems.append(f"mypy: {raw}")
            continue
        if error.get("severity") != "error":
            continue
        errors += 1
        where = f"{error['file']}:{error['line']}: {error['message']}  [{error['code']}]"
        path = (PACKAGE / error["file"]).resolve()
        entry = by_file.get(path)
        line = readme_line(entry, error["line"]) if entry is not None else None
        if entry is None or line is None:
            problems.append(f"not in the README's text, so not the README's fault: {where}")
            continue
        # The typed copy holds the README line verbatim (indented when wrapped).
        typed_text = path.read_text(encoding="utf-8").splitlines()[error["line"] - 1]
        if typed_text.strip() != readme[line - 1].strip():
            problems.append(f"line mapping broken (README line {line}): {where}")
            continue
        found.setdefault((line, error["code"]), []).append(where)
    if run.returncode not in (0, 1) or (run.returncode == 1 and not errors):
        problems.append(f"mypy exited with {run.returncode}: {run.stderr.strip()}")

    for (line, code), wheres in sorted(found.items()):
        if code not in faults.get(line, (set(), ""))[0]:
            problems += [f"README line {line}: unlisted error: {where}" for where in wheres]
    for line, (codes, reason) in sorted(faults.items()):
        missing = sorted(code for code in codes if (line, code) not in found)
        if missing:
            problems.append(
                f"README line {line}: listed fault [{', '.join(missing)}] no longer occurs"
            )
        else:
            print(f"README line {line} [{', '.join(sorted(codes))}]: the README's fault: {reason}")

    for problem in problems:
        print(problem)
    print(
        f"mypy --strict over {len(by_file)} examples: {errors} errors on "
        f"{len({line for line, _ in found})} README lines; {len(faults)} listed faults; "
        + ("FAILED" if problems else "all errors are listed README faults")
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
