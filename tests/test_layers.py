"""The code is the pipeline it claims to be (docs/architecture.md): the stages' layers are
import-linter's contracts (`.importlinter`, run by `make lint` and here); this module checks what
a layers contract cannot see: no circle of imports between two modules of one stage, and no
import of a project module hidden inside a function (the usual way a circle is dodged)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

from tests.paths import REPO

# Function-level imports allowed: optional dependencies only (each carries a comment saying so).
OPTIONAL = ("vllm", "pynvml")


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("advisor", include_external_packages=False)


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), on direct imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    return out


def test_no_module_imports_itself_through_others() -> None:
    assert _cycles(_graph()) == []


def test_no_project_import_inside_a_function() -> None:
    hidden = []
    for path in sorted((REPO / "advisor").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                for name in names:
                    if not name.startswith(OPTIONAL):
                        hidden.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
    assert hidden == [], hidden


def test_import_linter_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    p = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "0 broken" in p.stdout
