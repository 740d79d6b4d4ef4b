#!/usr/bin/env python3
"""Extract the README's Python examples so they can be type-checked.

Reads seed/README.md and writes, for every ```python block,
tests/examples/example_NN.py holding the block verbatim. A block with
top-level `await` has its statements from the first awaiting one onwards
indented into one `async def main() -> None:`; the statements before it stay
at module level, unchanged. tests/examples/index.json lists each example's
README line and whether it is complete (it names nothing it leaves undefined
and elides nothing) or a fragment, with the reason.

Run from anywhere: paths are relative to this script's package directory.
"""

from __future__ import annotations

import ast
import builtins
import json
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
README = PACKAGE / "seed" / "README.md"
OUT = PACKAGE / "tests" / "examples"
INDENT = "    "


def blocks(text: str) -> list[tuple[int, list[str]]]:
    """(fence line, code lines) of each ```python block, lines 1-based."""
    found = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        if lines[index].strip() == "```python":
            start = index + 1
            end = start
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if end == len(lines):
                raise SystemExit(f"README line {index + 1}: unclosed ```python block")
            found.append((index + 1, lines[start:end]))
            index = end
        index += 1
    return found


class _Awaits(ast.NodeVisitor):
    """Finds an await, async for or async with outside any function."""

    def __init__(self) -> None:
        self.found = False

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        pass

    def visit_Await(self, node: ast.Await) -> None:
        self.found = True

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self.found = True

    def visit_AsyncWith(self, node: ast.AsyncWith) -> None:
        self.found = True


def awaits(node: ast.AST) -> bool:
    visitor = _Awaits()
    visitor.visit(node)
    return visitor.found


def first_line(node: ast.stmt) -> int:
    decorators: list[ast.expr] = getattr(node, "decorator_list", [])
    return min([node.lineno] + [decorator.lineno for decorator in decorators])


def wrap(lines: list[str], tree: ast.Module) -> list[str] | None:
    """The block with its awaiting tail inside `async def main()`, or None
    when nothing awaits at top level."""
    body = tree.body
    split = next((i for i, statement in enumerate(body) if awaits(statement)), None)
    if split is None:
        return None
    # Start the function at the statement's first line, taking along the
    # comments and blank lines that lead up to it.
    start = first_line(body[split]) - 1
    floor = (body[split - 1].end_lineno or 0) if split else 0
    while start > floor and (not lines[start - 1].strip() or lines[start - 1].lstrip().startswith("#")):
        start -= 1
    while start < len(lines) and not lines[start].strip():
        start += 1
    head = lines[:start]
    tail = [INDENT + line if line.strip() else line for line in lines[start:]]
    return head + ["async def main() -> None:"] + tail


def bound_names(tree: ast.Module) -> set[str]:
    """Every name the block binds anywhere (scopes are not told apart)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
    return names


def fragment_reason(source: str) -> tuple[ast.Module | None, str | None]:
    """The parsed block and why it is a fragment (None when complete)."""
    try:
        tree = compile(
            source, "<block>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
    except SyntaxError as error:
        return None, f"does not parse: {error.msg} (block line {error.lineno})"
    reasons = []
    known = bound_names(tree) | set(dir(builtins)) | {"__name__", "__file__"}
    undefined = sorted(
        {
            node.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in known
        }
    )
    if undefined:
        reasons.append("names undefined things: " + ", ".join(undefined))
    if any(isinstance(node, ast.Constant) and node.value is Ellipsis for node in ast.walk(tree)):
        reasons.append("elides code with `...`")
    return tree, "; ".join(reasons) or None


def main() -> int:
    text = README.read_text(encoding="utf-8")
    OUT.mkdir(parents=True, exist_ok=True)
    for stale in OUT.glob("example_*.py"):
        stale.unlink()
    index: list[dict[str, object]] = []
    complete = 0
    for number, (line, code) in enumerate(blocks(text), start=1):
        source = "\n".join(code) + "\n"
        tree, reason = fragment_reason(source)
        wrapped = wrap(code, tree) if tree is not None else None
        name = f"example_{number:02d}.py"
        header = [
            f"# README.md line {line}: extracted by scripts/extract.py; do not edit.",
        ]
        if wrapped is not None:
            header.append("# Its top-level awaits are wrapped in `async def main()`.")
        body = wrapped if wrapped is not None else code
        (OUT / name).write_text("\n".join(header + body) + "\n", encoding="utf-8")
        complete += reason is None
        index.append(
            {
                "file": name,
                "line": line,
                "complete": reason is None,
                "wrapped": wrapped is not None,
                "reason": reason,
            }
        )
    (OUT / "index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    print(f"{len(index)} examples ({complete} complete) written to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
