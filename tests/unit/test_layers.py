"""How the code is layered: the event contract imports nothing that touches IO, and no module of the
project imports one that imports it back."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [
    ROOT / "shared" / "docsum_shared",
    ROOT / "llm" / "docsum_llm",
    ROOT / "cli" / "docsum_cli",
    *sorted((ROOT / "services").glob("*/docsum_*")),
    ROOT / "pipeline" / "docsum_pipeline",
]
# Libraries that open sockets, files or processes: a consumer of the contract must not need them.
IO_LIBRARIES = {"asyncpg", "aiokafka", "openai", "httpx", "fastapi", "uvicorn", "prometheus_client", "opentelemetry"}


def test_the_event_contract_imports_nothing_that_touches_io() -> None:
    probe = "import json, sys; import docsum_shared.events; print(json.dumps(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    modules = json.loads(run.stdout)
    loaded = {m.split(".")[0] for m in modules} | {m for m in modules if m.startswith("docsum_shared")}
    assert not loaded & IO_LIBRARIES
    ours = {m for m in loaded if m.startswith("docsum_shared.")}
    assert ours <= {
        "docsum_shared.events",
        "docsum_shared.levels",
        "docsum_shared.options",
        "docsum_shared.states",
        "docsum_shared.readmodel",
        "docsum_shared.readmodel.schemas",
    }


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in package.rglob("*.py"):
            parts = path.relative_to(package.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports, at its top or inside a function (not under TYPE_CHECKING)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges = set()
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        edges |= {t for t in targets if t in known and t != name}
    return edges


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_one_that_imports_it_back() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    # A package's __init__ that gathers its submodules is not a cycle of theirs: an edge from a
    # submodule up to its own package is left out.
    graph = {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in graph.items()}
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
