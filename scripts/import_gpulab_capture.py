#!/usr/bin/env python3
"""Turn a gpu-lab scenario capture into a session directory (the replay format).

A gpu-lab capture (see shared/gpu-lab and shared/fixtures/h200-vllm-0.25) holds every
/metrics page of a run in one `metrics.prom.gz`, each page after a line
`# SNAPSHOT t=<unix seconds> phase=...`, plus `server.log`, `serve_args.txt` and
`bench_args.txt`. This writes `metrics/<unix-ms>.prom.gz`, `vllm.log`, `engine.json`
(the serve arguments, redacted, as the command line) and `meta.json`.

Usage: import_gpulab_capture.py CAPTURE_DIR OUT_DIR [--note TEXT]
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from advisor.core import engine_json
from advisor.core.redact import redact_argv
from advisor.sources import engine
from advisor.sources import host as host_src
from advisor.sources.session import SessionWriter


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("out")
    ap.add_argument("--note", default="")
    ap.add_argument("--hardware", default="1x NVIDIA H200 (141 GiB)")
    ap.add_argument(
        "--gpu",
        default="NVIDIA H200, 143771 MiB",
        help="the host probe's nvidia-smi line (name, memory.total) for the machine that ran the capture",
    )
    args = ap.parse_args()
    cap, out = Path(args.capture), Path(args.out)
    raw = gzip.decompress((cap / "metrics.prom.gz").read_bytes()).decode("utf-8", "replace")
    serve = (cap / "serve_args.txt").read_text().split()
    # serve_args.txt holds the flags only; the model is the one the pages name
    model = re.search(r'model_name="([^"]+)"', raw)
    argv = ["vllm", "serve", model.group(1) if model else "unknown-model", *serve]
    w = SessionWriter(out, compress=True)
    first = last = None
    for part in re.split(r"^# SNAPSHOT ", raw, flags=re.M)[1:]:
        head, _, body = part.partition("\n")
        m = re.search(r"t=([\d.]+)", head)
        if not m or not body.strip():
            continue
        t = float(m.group(1))
        first = t if first is None else first
        last = t
        w.add_scrape(t, body)
    for line in (cap / "server.log").read_text(errors="replace").splitlines():
        if '"GET /metrics' in line:
            continue
        w.add_log_line(line)
    info = engine.resolve(argv=argv, host=host_src.parse_nvidia_smi(args.gpu))
    w.write_engine(engine_json.to_json(info))
    import datetime as dt

    started = dt.datetime.fromtimestamp(first or 0, dt.UTC).isoformat()
    w.close(
        {
            "started_at": started,
            "duration_s": round((last or 0) - (first or 0), 3),
            "interval_s": 2.0,
            "serve_args": redact_argv(argv),
            "load": (cap / "bench_args.txt").read_text().strip()
            if (cap / "bench_args.txt").exists()
            else None,
            "hardware": args.hardware,
            "notes": args.note,
            "recorded_by": f"scripts/import_gpulab_capture.py from {cap.name}",
        }
    )
    print(f"{out}: {w.scrapes} scrapes, {w.log_lines} log lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
