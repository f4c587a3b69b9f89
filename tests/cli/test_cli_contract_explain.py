"""Issue 33's contract, as a new user meets ``explain``: the desired replicas in every format,
and one committed page that has no rates. Run through the console script's entry
(advisor.cli:main) in a subprocess of this checkout's interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "advisor" / "data" / "sessions" / "h200-A_s256"


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ADVISOR_")}
    e["HOME"] = str(tmp)
    return subprocess.run(
        [sys.executable, "-c", "from advisor.cli import main; main()", *args],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard: a loaded 2-core machine is slow to start the interpreter
        env=e,
        stdin=subprocess.DEVNULL,
    )


# ----------------------------------------------------------------------------- desired replicas
@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_the_desired_replicas_are_in_the_text_and_markdown(tmp_path: Path, fmt: str) -> None:
    """The demo's page says 7 replicas; explain said it in no format (issue 33)."""
    p = cli(tmp_path, "explain", "--session", str(DEMO), "--format", fmt)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if "Desired replicas:" in ln]
    assert len(lines) == 1, p.stdout
    assert "7 (1 now)" in lines[0] and "predicted at 7" in p.stdout.replace("\n", " ")


def test_the_desired_replicas_are_in_the_json(tmp_path: Path) -> None:
    p = cli(tmp_path, "explain", "--session", str(DEMO), "--format", "json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)["replicas"]
    assert r["desired"] == 7 and r["current"] == 1
    assert r["predicted_at_desired"]["replicas"] == 7
