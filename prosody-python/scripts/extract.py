#!/usr/bin/env python3
"""Extract the README's Python examples so they can be run and type-checked.

Reads seed/README.md and writes, for every ```python block,
tests/examples/example_NN.py holding the block verbatim. A block with
top-level `await` has its statements from the first awaiting one onwards
indented into one `async def main() -> None:`; the statements before it stay
at module level, unchanged.

It also writes tests/examples/typed_NN.py, the type-check copy: a preamble,
then the same text as example_NN.py. The preamble gives, typed, exactly the
names the block uses but binds nowhere itself (the README defines or imports
them elsewhere), plus what those definitions need:

- the public API, `from prosody import ...` (any name in `prosody.__all__`);
- `datetime`: the module when the block reads a module attribute from it
  (`datetime.datetime`, `datetime.timedelta`, ...), otherwise the class;
  `timedelta`, `timezone`, and the `abc`/`typing` names, from their modules;
- the README's own stand-ins: `client: ProsodyClient`, `context: Context`,
  `config: dict[str, Any]`, `tracer: Tracer`, the `Activity` TypedDict,
  `notify`, a complete `MyHandler` and `CURRENT_ORDER` as the README
  declares it.

A name found in none of these is left undefined, for the type checker to
report. The preamble binds nothing the block binds, so it never shadows or
redefines the block's own names.

tests/examples/index.json lists, for each example, its README line, whether
it is complete (it names nothing it leaves undefined and elides nothing) or
a fragment with the reason, and where its text starts in the typed copy
(`typed_body_line`) and where the inserted `async def main()` is
(`main_line`, or null), so a typed-copy line maps back to a README line.

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
API = PACKAGE / "python" / "prosody" / "__init__.py"
OUT = PACKAGE / "tests" / "examples"
INDENT = "    "

# Where the preamble imports a name from; None imports the module itself.
IMPORTS: dict[str, str | None] = {
    "ABC": "abc",
    "abstractmethod": "abc",
    "Any": "typing",
    "Generic": "typing",
    "TypedDict": "typing",
    # `default=` needs typing_extensions before Python 3.13.
    "TypeVar": "typing_extensions",
    "timedelta": "datetime",
    "timezone": "datetime",
    "Tracer": "opentelemetry.trace",
    "asyncio": None,
    "signal": None,
    "sys": None,
}

# The README's stand-ins: name -> (names the definition needs, its lines), in
# an order where each definition follows those it needs.
DEFINITIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "client": (("ProsodyClient",), ("client: ProsodyClient",)),
    "context": (("Context",), ("context: Context",)),
    "config": (("Any",), ("config: dict[str, Any]",)),
    "tracer": (("Tracer",), ("tracer: Tracer",)),
    "CURRENT_ORDER": (
        ("ValueDefinition",),
        ("CURRENT_ORDER: ValueDefinition[dict[str, str]]",),
    ),
    "Activity": (("TypedDict",), ("class Activity(TypedDict):", "    action: str")),
    "notify": (
        ("Message", "Activity"),
        ("async def notify(key: str, batch: list[Message[Activity]]) -> None: ...",),
    ),
    "MyHandler": (
        ("EventHandler", "Context", "Message", "ExciseMessage", "Timer"),
        (
            "class MyHandler(EventHandler):",
            "    async def on_message(self, context: Context, message: Message) -> None: ...",
            "    async def on_excise(self, context: Context, message: ExciseMessage) -> None: ...",
            "    async def on_timer(self, context: Context, timer: Timer) -> None: ...",
        ),
    ),
}

# Attributes of the datetime module that the datetime class lacks.
DATETIME_MODULE_ONLY = {
    "datetime", "date", "timedelta", "timezone", "tzinfo", "UTC", "MINYEAR", "MAXYEAR",
}


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


def wrap(lines: list[str], tree: ast.Module) -> tuple[list[str], int] | None:
    """The block with its awaiting tail inside `async def main()`, and the
    index of that inserted line; None when nothing awaits at top level."""
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
    return head + ["async def main() -> None:"] + tail, len(head)


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


def public_api() -> set[str]:
    """The names of `prosody.__all__`, read without importing the package."""
    for node in ast.parse(API.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            return {str(name) for name in ast.literal_eval(node.value)}
    raise SystemExit(f"{API}: no __all__")


def preamble(tree: ast.Module, api: set[str]) -> list[str]:
    """Typed definitions of the names `tree` uses but never binds."""
    bound = bound_names(tree)
    used = {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
    }
    wanted: set[str] = set()
    pending = sorted(used - bound)
    while pending:
        name = pending.pop()
        if name in wanted:
            continue
        wanted.add(name)
        for needed in DEFINITIONS.get(name, ((), ()))[0]:
            if needed in bound:
                raise SystemExit(
                    f"the preamble's {name} needs {needed}, which the block binds itself"
                )
            pending.append(needed)
    modules: set[str] = set()
    froms: dict[str, list[str]] = {}
    for name in sorted(wanted):
        if name == "datetime":
            as_module = any(
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "datetime"
                and node.attr in DATETIME_MODULE_ONLY
                for node in ast.walk(tree)
            )
            if as_module:
                modules.add("datetime")
            else:
                froms.setdefault("datetime", []).append("datetime")
        elif name in api:
            froms.setdefault("prosody", []).append(name)
        elif name in IMPORTS:
            module = IMPORTS[name]
            if module is None:
                modules.add(name)
            else:
                froms.setdefault(module, []).append(name)
    lines = [f"import {module}" for module in sorted(modules)]
    # The standard library and other packages first, prosody last.
    for module in sorted(froms, key=lambda module: (module == "prosody", module)):
        lines.append(f"from {module} import {', '.join(froms[module])}")
    for name, (_, definition) in DEFINITIONS.items():
        if name in wanted:
            lines += definition
    return lines


def main() -> int:
    text = README.read_text(encoding="utf-8")
    api = public_api()
    OUT.mkdir(parents=True, exist_ok=True)
    for stale in [*OUT.glob("example_*.py"), *OUT.glob("typed_*.py")]:
        stale.unlink()
    index: list[dict[str, object]] = []
    complete = 0
    for number, (line, code) in enumerate(blocks(text), start=1):
        source = "\n".join(code) + "\n"
        tree, reason = fragment_reason(source)
        wrapping = wrap(code, tree) if tree is not None else None
        wrapped = wrapping[0] if wrapping is not None else None
        name = f"example_{number:02d}.py"
        typed = f"typed_{number:02d}.py"
        header = [
            f"# README.md line {line}: extracted by scripts/extract.py; do not edit.",
        ]
        if wrapped is not None:
            header.append("# Its top-level awaits are wrapped in `async def main()`.")
        body = wrapped if wrapped is not None else code
        (OUT / name).write_text("\n".join(header + body) + "\n", encoding="utf-8")
        typed_head = header + ["# The type-check copy: a typed preamble, then the example's text."]
        typed_head += preamble(tree, api) if tree is not None else []
        typed_head.append(f"# --- {name} ---")
        (OUT / typed).write_text("\n".join(typed_head + body) + "\n", encoding="utf-8")
        body_line = len(typed_head) + 1
        main_line = body_line + wrapping[1] if wrapping is not None else None
        complete += reason is None
        index.append(
            {
                "file": name,
                "line": line,
                "complete": reason is None,
                "wrapped": wrapped is not None,
                "reason": reason,
                "typed": typed,
                "typed_body_line": body_line,
                "main_line": main_line,
            }
        )
    (OUT / "index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    print(f"{len(index)} examples ({complete} complete) written to {OUT}, with typed copies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
