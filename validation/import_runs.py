#!/usr/bin/env python3
"""Import what ``validation/suite.py`` brought back into the committed validation record.

usage: .venv/bin/python validation/import_runs.py [--as OLD=NEW ...] DIR [DIR ...]

Each DIR holds ``<run>.tgz`` files and ``suite.json`` (one device call's ``$OUT``). Every run
becomes ``validation/runs/<run>/``: a replayable session (``metrics/*.prom.gz``, ``vllm.log.gz``,
``engine.json``, ``meta.json``) plus ``bench.json.gz`` (vllm bench serve's result without the
generated texts), ``itls_ms.json.gz`` (per-request inter-token latencies, ms), the daemon's
diagnosis timeline ``diagnosis.jsonl.gz``, its diagnosis when the load ended (``advice.json``) and
the exact ``serve_argv.json`` (and ``cpu.json``, the CPU seconds of the recorder, the daemon and the
server's processes over the bench, where the suite wrote it; and a probed run's ``probe*`` files,
gzipped: where its server's time went). ``validation/results.json`` keeps every run's state from the suite.
Then run ``validation/report.py`` to refresh docs/validation.md.

A run already imported under the same id is replaced. ``--as kv-seqs-bind=kv-seqs-bind-r2``
imports a later round of a scenario under a new name (run ids and the ``scenario`` field), so
the earlier round's runs stay as they are; ``--as kv-seqs-bind.max-num-seqs-48=kv-seqs-bind-aa.1``
renames one run (its scenario becomes the new id's part before the dot).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "validation" / "runs"
RESULTS = REPO / "validation" / "results.json"


def _gz_write(path: Path, text: str) -> None:
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # mtime 0: the same bytes for the same text
        f.write(text.encode())


def import_run(src: Path, dest: Path) -> None:
    """One extracted run dir (the suite's RUNS/<run>) -> dest."""
    if dest.exists():
        shutil.rmtree(dest)
    session = src / "session"
    if not (session / "metrics").is_dir():
        raise SystemExit(f"{src}: no recorded session in it")
    shutil.copytree(session / "metrics", dest / "metrics")
    for name in ("engine.json", "meta.json"):
        if (session / name).exists():
            shutil.copy(session / name, dest / name)
    log = session / "vllm.log"
    if log.exists():
        _gz_write(dest / "vllm.log.gz", log.read_text(errors="replace"))
    bench = src / "bench.json"
    if bench.exists():
        data = json.loads(bench.read_text())
        itls = data.pop("itls", None)
        data.pop("generated_texts", None)
        _gz_write(dest / "bench.json.gz", json.dumps(data, separators=(",", ":")))
        if itls is not None:  # seconds -> ms with 0.01 ms resolution (the clock's own is ~µs)
            ms = [[round(x * 1000, 2) for x in req] for req in itls]
            _gz_write(dest / "itls_ms.json.gz", json.dumps(ms, separators=(",", ":")))
    timeline = src / "diagnosis.jsonl"
    if timeline.exists():
        _gz_write(dest / "diagnosis.jsonl.gz", _compact_timeline(timeline))
    for name in ("advice.json", "serve_argv.json", "cpu.json"):
        if (src / name).exists():
            shutil.copy(src / name, dest / name)
    for probe in sorted(
        p for p in src.glob("probe*") if p.name != "probe-on"
    ):  # a probed run's (suite.py's ``_probe``), gzipped
        _gz_write(dest / f"{probe.name}.gz", probe.read_text(errors="replace"))


def _compact_timeline(path: Path) -> str:
    """The daemon's diagnosis every 5 s, reduced to what changes: status, rule, change."""
    out = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        d = row.get("diagnosis") or {}
        rec = d.get("recommendation") or {}
        out.append(
            json.dumps(
                {
                    "t": round(row.get("t", 0.0), 1),
                    "status": d.get("status"),
                    "rule": rec.get("rule"),
                    "change": rec.get("change"),
                    "pending": d.get("pending"),
                }
            )
        )
    return "\n".join(out) + "\n"


def parse_args(argv: list[str]) -> tuple[dict[str, str], list[Path]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="a device call's $OUT")
    ap.add_argument("--as", dest="renames", action="append", default=[], metavar="OLD=NEW")
    args = ap.parse_args(argv)
    renames: dict[str, str] = {}
    for spec in args.renames:
        old, _, new = spec.partition("=")
        if not old or not new or ("." in old) != ("." in new):
            ap.error(f"--as wants SCENARIO=NAME or RUN=NEW_RUN, got {spec!r}")
        renames[old] = new
    return renames, args.dirs


def renamed(run_id: str, renames: dict[str, str]) -> str:
    if run_id in renames:
        return renames[run_id]
    scenario, dot, rest = run_id.partition(".")
    return renames.get(scenario, scenario) + dot + rest


def main(argv: list[str]) -> int:
    renames, dirs = parse_args(argv)
    results: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"runs": {}}
    RUNS.mkdir(parents=True, exist_ok=True)
    for d in dirs:
        suite = json.loads((d / "suite.json").read_text()) if (d / "suite.json").exists() else None
        state = {r["id"]: r for r in suite["runs"]} if suite else {}
        for tgz in sorted(d.glob("*.tgz")):
            run_id = tgz.name.removesuffix(".tgz")
            new_id = renamed(run_id, renames)
            with tempfile.TemporaryDirectory() as tmp, tarfile.open(tgz) as tf:
                tf.extractall(tmp, filter="data")
                import_run(Path(tmp) / run_id, RUNS / new_id)
            if run_id in state:
                r = dict(state[run_id])
                for k in ("pid", "started", "status"):
                    r.pop(k, None)
                r["id"], r["scenario"] = new_id, new_id.partition(".")[0]
                results["runs"][new_id] = r
            print(f"imported {run_id}" + (f" as {new_id}" if new_id != run_id else ""))
        for run_id, r in state.items():  # runs that ended without a bench (e.g. failed start-ups)
            new_id = renamed(run_id, renames)
            if r.get("status") == "failed" and new_id not in results["runs"]:
                kept = {k: v for k, v in r.items() if k not in ("pid", "started")}
                kept["id"], kept["scenario"] = new_id, new_id.partition(".")[0]
                results["runs"][new_id] = kept
    results["runs"] = dict(sorted(results["runs"].items()))
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
