"""The log reader under a flood (issue 34, F27), before and after, as one table.

A "12.75M-line"-style flood scaled down to run in under a minute: vLLM's request lines (uvicorn's
access line, `Added request`) with an engine-stats line every 100 lines, read the way the daemon
reads its `--log-file` (``FileFollower`` -> ``Advisor.parse_log_line`` -> ``apply_log_events``)
on one core. Two measures, each in a process of its own, for the tree before F27 (extracted
from git, default: the commit before it) and for this tree:

- lines/s: a file of N lines read and parsed from its start (CPU time of that process);
- a flood that grows faster than it is read (W lines/s for D s, written by another process):
  how far behind the reader is when the writer stops (lines, and seconds at the lines/s
  above) and what it skipped.

Not part of `make test` (timings vary with the machine's load); the numbers of
docs/reliability.md come from here.

    .venv/bin/python scripts/bench_log_follow.py [--before REF] [--lines N] [--rate W] [--seconds D]
"""

from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BEFORE = "8d4194b"  # the commit before F27 (the log reader read every line, in order)
FLOOD_LINES = 12_750_000  # the flood of issue 34

LINES = (
    '(APIServer pid=1) INFO:     10.0.{a}.{b}:{p} - "POST /v1/completions HTTP/1.1" 200 OK',
    "(APIServer pid=1) INFO 11-30 10:{m:02d}:{s:02d} [async_llm.py:273] Added request cmpl-{i:012x}-0.",
)
STATS = (
    "(APIServer pid=1) INFO 11-30 10:{m:02d}:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: "
    "21594.5 tokens/s, Avg generation throughput: 3975.2 tokens/s, Running: 38 reqs, Waiting: 218 reqs, "
    "GPU KV cache usage: 98.3%, Prefix cache hit rate: 0.1%"
)


def flood_line(i: int) -> str:
    m, s = (i // 6000) % 60, (i // 100) % 60
    if i % 100 == 99:
        return STATS.format(m=m, s=s)
    return LINES[i % 2].format(a=i % 250, b=(i // 250) % 250, p=30000 + i % 30000, m=m, s=s, i=i)


def write_flood(path: Path, n: int) -> int:
    with path.open("w") as fh:
        for i in range(n):
            fh.write(flood_line(i) + "\n")
    return path.stat().st_size


# Run inside the measured tree (PYTHONPATH): only what both trees have.
MEASURE = r"""
import json, os, sys, threading, time, subprocess
from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive.runner import Advisor
from advisor.sources import follow
mode, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
adv = Advisor(Config(), load_rules())

def feed(line):
    ev = adv.parse_log_line(line)
    if ev:
        adv.apply_log_events(ev)

if mode == "rate":
    f = follow.FileFollower(path, from_start=True, poll_interval=0.01)
    f.max_backlog_bytes = 1 << 62  # read every line (a tree before F27 has no such bound)
    t0, k = time.process_time(), 0
    for line in f.lines():
        feed(line)
        k += 1
        if k >= n:
            break
    f.close()
    print(json.dumps({"lines_per_s": k / (time.process_time() - t0)}))
else:
    rate, seconds, writer = float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
    open(path, "w").close()
    f = follow.FileFollower(path, from_start=True, poll_interval=0.01)
    read = [0]
    def reader():
        for line in f.lines():
            feed(line)
            read[0] += 1
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    w = subprocess.run([sys.executable, writer, path, str(rate), str(seconds)], capture_output=True, text=True)
    written = int(w.stdout.strip())
    done, skipped = read[0], getattr(f, "skipped_lines", 0)
    f.close()
    print(json.dumps({"written": written, "read": done, "skipped": skipped,
                      "behind": written - done - skipped, "skips": getattr(f, "skips", 0)}))
"""

WRITER = r"""
import sys, time
sys.path.insert(0, sys.argv[0].rsplit("/", 1)[0])
from flood import flood_line
path, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
t0, i = time.monotonic(), 0
with open(path, "a") as fh:
    while (now := time.monotonic() - t0) < seconds:
        due = int(rate * now)
        if due > i:
            fh.write("".join(flood_line(k) + "\n" for k in range(i, due)))
            fh.flush()
            i = due
        time.sleep(0.01)
print(i)
"""


def extract(ref: str, into: Path) -> Path:
    """The `advisor` package and `rules/` of ``ref``, from git, into ``into``."""
    data = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", ref, "advisor", "rules"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def measure(tree: Path, *args: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, *args],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        cwd=tree,  # `-c` puts the working directory first on sys.path
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"error: the measurement in {tree} failed: {out.stderr.strip().splitlines()[-1:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", default=BEFORE, help="the git commit to compare with (default: %(default)s)")
    ap.add_argument("--lines", type=int, default=60_000, help="lines read for lines/s (default: %(default)s)")
    ap.add_argument(
        "--rate", type=float, default=40_000, help="flood: lines/s written (default: %(default)s)"
    )
    ap.add_argument(
        "--seconds", type=float, default=10.0, help="flood: seconds written (default: %(default)s)"
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "flood.py").write_text(f"LINES = {LINES!r}\nSTATS = {STATS!r}\n\n" + _source(flood_line))
        (t / "writer.py").write_text(WRITER)
        size = write_flood(t / "rate.log", a.lines)
        trees = {f"before ({a.before})": extract(a.before, t / "before"), "after (this tree)": REPO}
        rows = []
        for name, tree in trees.items():
            r = measure(tree, "rate", str(t / "rate.log"), str(a.lines))["lines_per_s"]
            fl = measure(
                tree, "flood", str(t / "flood.log"), "0", str(a.rate), str(a.seconds), str(t / "writer.py")
            )
            rows.append((name, r, fl))
    print(
        f"Log reader under a flood: {a.lines:,} lines ({size / a.lines:.0f} B/line) read for lines/s; a flood"
    )
    print(
        f"of {a.rate:,.0f} lines/s for {a.seconds:g} s written by another process while the reader follows it.\n"
    )
    head = (
        "| tree | lines/s (parsed, 1 core) | flood: written | read | skipped | behind at its end "
        f"| {FLOOD_LINES / 1e6:.2f}M lines: behind |"
    )
    print(head)
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r, fl in rows:
        behind_s = fl["behind"] / r
        # the flood: every line read (before), or at most the backlog bound (after)
        whole = FLOOD_LINES / r if not fl["skips"] else fl["behind"] / r
        print(
            f"| {name} | {r:,.0f} | {fl['written']:,.0f} | {fl['read']:,.0f} | {fl['skipped']:,.0f} "
            f"| {fl['behind']:,.0f} lines ({behind_s:.0f} s) | {_dur(whole)} |"
        )
    return 0


def _dur(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 120 else f"{s:.0f} s"


def _source(fn: object) -> str:
    return inspect.getsource(fn)  # type: ignore[arg-type]


if __name__ == "__main__":
    raise SystemExit(main())
