"""The console script's start-up does only what the command asked for needs (issue 33: 1.0-1.3 s
for `--version`, the whole pipeline imported first). Bounded by the modules a fresh interpreter
has loaded after the command, not by seconds (`scripts/cli_startup.py` prints the times)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("requests", "apscheduler", "prometheus_client", "structlog", "urllib3", "rich")
REPORT = (
    "import json, sys\n"
    "from advisor.cli import main\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
    "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
)


def loaded_after(tmp: Path, *args: str) -> set[str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ADVISOR_")}
    p = subprocess.run(
        [sys.executable, "-c", REPORT, *args],
        cwd=tmp,
        env={**e, "HOME": str(tmp)},
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard
    )
    return set(json.loads(p.stderr.strip().splitlines()[-1]))


def tops(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("args", [["--version"], ["no-such-command"]], ids=" ".join)
def test_version_and_an_unknown_command_load_no_command(tmp_path: Path, args: list[str]) -> None:
    mods = loaded_after(tmp_path, *args)
    assert not tops(mods) & set(HEAVY), sorted(tops(mods) & set(HEAVY))
    ours = {m for m in mods if m.startswith("advisor.")}
    assert ours <= {"advisor.cli", "advisor.cli.base", "advisor.core"} | {
        m for m in ours if m.startswith("advisor.core.")
    }, sorted(ours)
    assert not any(m.startswith(("advisor.drive", "advisor.sources", "advisor.outputs")) for m in mods)


def test_rules_list_loads_the_rules_not_the_daemon(tmp_path: Path) -> None:
    mods = loaded_after(tmp_path, "rules", "list")
    assert "advisor.diagnose.ruleset" in mods  # it did its job
    assert not tops(mods) & {"requests", "apscheduler", "prometheus_client", "urllib3"}
    assert not any(m.startswith(("advisor.drive", "advisor.sources")) for m in mods)
