"""How long the console script takes to start: the median of N runs of `--version`, a usage
error of `explain` and `rules list`, for this checkout and (``--before REV``) for another
revision of it, side by side: wall time, CPU time (user + system of the child, which other
processes' load adds less to) and the number of modules each run imports.

    python scripts/cli_startup.py --before 1c6c4df [--runs 10]

Each run is a fresh interpreter (``python -c "from advisor.cli import main; main()" ...``)
with PYTHONPATH at the tree measured; ``--before`` exports REV with ``git archive`` into a
temporary folder. The two trees' runs alternate, so that a load that comes and goes falls on
both. Times depend on the machine and its load; the module counts do not.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = (
    ("--version", ["--version"]),
    ("explain usage error", ["explain", "--bogus"]),
    ("rules list", ["rules", "list"]),
)
COUNT = (
    "import sys\n"
    "from advisor.cli import main\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
    "print(len(sys.modules), file=sys.stderr)\n"
)


def run_once(tree: Path, argv: list[str], code: str) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall seconds, CPU seconds of the child, the process)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", code, *argv], cwd=tree, env=env, capture_output=True, text=True, timeout=600
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p


def measure(trees: list[Path], runs: int) -> list[dict[str, tuple[float, float, int]]]:
    """Per tree, per case: (median wall seconds, median CPU seconds, modules imported)."""
    out: list[dict[str, tuple[float, float, int]]] = [{} for _ in trees]
    for name, argv in CASES:
        walls: list[list[float]] = [[] for _ in trees]
        cpus: list[list[float]] = [[] for _ in trees]
        for _ in range(runs):
            for i, tree in enumerate(trees):  # alternating: the same load on both
                wall, cpu, _p = run_once(tree, argv, "from advisor.cli import main; main()")
                walls[i].append(wall)
                cpus[i].append(cpu)
        for i, tree in enumerate(trees):
            _, _, p = run_once(tree, argv, COUNT)
            modules = int(p.stderr.strip().splitlines()[-1])
            out[i][name] = (statistics.median(walls[i]), statistics.median(cpus[i]), modules)
    return out


def export(rev: str, into: Path, paths: tuple[str, ...] = ()) -> Path:
    """The tree of revision ``rev`` (only ``paths`` of it, where given) under ``into``/tree."""
    archive = into / "tree.tar"
    with archive.open("wb") as fh:
        subprocess.run(["git", "archive", rev, *paths], cwd=REPO, stdout=fh, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="a revision to compare with (git archive)")
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    trees = []
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as tmp:
        if args.before:
            trees.append((f"before ({args.before})", export(args.before, Path(tmp))))
        trees.append(("after (this tree)", REPO))
        measured = measure([t for _, t in trees], args.runs)
    results = [(label, m) for (label, _), m in zip(trees, measured, strict=True)]
    print(f"median of {args.runs} runs: wall s / CPU s (modules imported)")
    print(f"{'command':<22}" + "".join(f"{label:>32}" for label, _ in results))
    for name, _ in CASES:
        cells = "".join(f"{f'{r[name][0]:.2f} / {r[name][1]:.2f} ({r[name][2]})':>32}" for _, r in results)
        print(f"{name:<22}{cells}")


if __name__ == "__main__":
    main()
