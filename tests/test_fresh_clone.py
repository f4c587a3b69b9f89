"""The committed tree is complete: a clone of HEAD into a folder with nothing beside it runs the
tests that read fixtures, the bundled sessions and the generated files, and they pass there.

(CI itself runs on a fresh clone, but with the team's shared folder beside it; this test removes
that difference. Together with tests/readguard.py, which fails any test that opens a file outside
the repository, no test can depend on a file only one machine has.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the modules that read committed data by path: pages, sessions, logs, bench files, runs, generated
PATH_CHECKS = [
    "tests/sources/test_metrics.py",
    "tests/derive/test_window.py",
    "tests/sources/test_logs.py",
    "tests/sources/test_session.py",
    "tests/outputs/test_generate.py",
    "tests/test_readguard.py",
]
# in those files, what reads no path the others leave unread, left to the suite itself (half the
# path checks' ~22 s of CPU): the window rebuilt incrementally over every session
# (tests/sources/test_session.py loads them all), the generation run twice and diffed
# (test_committed_files_match_a_fresh_generation generates from the same rules and templates)
NOT_IN_CLONE = [
    "tests/derive/test_window.py::test_incremental_window_equals_the_old_one_on_recorded_sessions",
    "tests/derive/test_window.py::test_memory_per_frame_does_not_grow_with_the_histograms_engines",
    "tests/outputs/test_generate.py::test_diff_reports_missing_and_changed_files",
    "tests/outputs/test_generate.py::test_generation_is_deterministic",
]


@pytest.mark.slow  # a clone, a collection and six test files in a fresh process: ~20-50 s
def test_a_clone_alone_in_its_folder_passes_the_path_checks(tmp_path: Path) -> None:
    solo = tmp_path / "solo"
    solo.mkdir()
    clone = solo / "vllm-advisor"
    p = subprocess.run(
        ["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in solo.iterdir()) == ["vllm-advisor"]  # nothing beside it
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VLLM_ADVISOR_"))}
    env["PYTHONPATH"] = str(clone)
    which = subprocess.run(
        [sys.executable, "-c", "import advisor; print(advisor.__file__)"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
    )
    assert which.stdout.strip().startswith(str(clone)), which.stdout + which.stderr  # the clone's code
    # one run in a fresh process: the whole suite collected (its count is checked against the
    # README's), the path checks run, every other test file deselected (collecting twice, once
    # for the count and once to run, was ~8 s of one core more)
    others = sorted(str(f.relative_to(clone)) for f in (clone / "tests").rglob("test_*.py") if f.is_file())
    deselect = [x for f in others if f not in PATH_CHECKS for x in ("--deselect", f)]
    assert len(deselect) // 2 == len(others) - len(PATH_CHECKS)  # every path check is a file there
    deselect += [x for node in NOT_IN_CLONE for x in ("--deselect", node)]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *deselect],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    last = run.stdout.strip().splitlines()[-1]  # "245 passed, 1704 deselected in 27.2s"
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|skipped|deselected|xfailed|xpassed)", last)}
    assert counts.get("passed", 0) > 0 and counts.get("deselected", 0) > 0, last
    # README's count of the suite stays true (issue 33): within 3% of what the clone collects
    collected = sum(counts.values())
    said = int(
        re.search(r"([\d,]+) tests, among them", (clone / "README.md").read_text())[1].replace(",", "")
    )
    assert abs(said - collected) <= 0.03 * collected, f"README says {said} tests, {collected} are collected"
