"""What ``pip install vllm-advisor[plugin]`` relies on: the entry point, the extra, the docs.

(The built wheel's entry point is exercised for real in test_plugin_realvllm.py.)
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from advisor.plugin import PLUGIN_NAME
from advisor.plugin.versions import FIELDS, VERSIONS_CHECKED, fields_of, has_field

ROOT = Path(__file__).resolve().parents[2]


def test_entry_point_names_the_stat_logger_class() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    target = project["entry-points"]["vllm.stat_logger_plugins"][PLUGIN_NAME]
    module, cls = target.split(":")
    source = ROOT / (module.replace(".", "/") + ".py")
    tree = ast.parse(source.read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    assert [b.id for b in node.bases if isinstance(b, ast.Name)] == ["StatLoggerBase"]
    extras = project["optional-dependencies"]
    assert any(dep.startswith("ddsketch") for dep in extras["plugin"])
    assert any(dep.startswith("ddsketch") for dep in extras["dev"])


def test_plugin_imports_nothing_else_of_the_advisor() -> None:
    """It runs inside vLLM's process: only advisor.plugin.* (and at most advisor.names)."""
    for path in (ROOT / "advisor" / "plugin").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            mods = []
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            for mod in mods:
                if mod == "advisor" or mod.startswith("advisor."):
                    assert mod.startswith("advisor.plugin") or mod == "advisor.names", (path.name, mod)


def test_docs_table_names_every_field_the_plugin_reads() -> None:
    doc = (ROOT / "docs" / "plugin.md").read_text()
    for f in FIELDS:
        assert f.name in doc, f"{f.owner}.{f.name} is missing from docs/plugin.md's version table"
    for v in VERSIONS_CHECKED:
        assert v in doc


def test_version_table_lookups() -> None:
    assert not has_field("SchedulerStats", "iteration_details", "0.25.0")
    assert has_field("SchedulerStats", "iteration_details", "0.26.0")
    assert has_field("FinishedRequestStats", "num_preemptions", "0.33.0+cpu")
    assert "num_preemptions" not in fields_of("FinishedRequestStats", "0.29.0")
