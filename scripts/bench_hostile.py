"""What hostile inputs cost (issue 23, class 3), as one table: a page of mostly unknown series,
labels that change on every page, a log line of nested braces, lines that once backtracked. Not part of `make test` (timings
vary with the machine's load); the numbers of docs/reliability.md come from here.

    .venv/bin/python scripts/bench_hostile.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import resource
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from advisor.core.config import Config  # noqa: E402
from advisor.core.redact import redact_text  # noqa: E402
from advisor.diagnose.ruleset import RuleError, load_rules  # noqa: E402
from advisor.drive.runner import Advisor, ReplayClock  # noqa: E402
from advisor.sources import logs  # noqa: E402
from advisor.sources.metrics import parse_page  # noqa: E402

PAGE = (REPO / "tests" / "fixtures" / "pages" / "cpu-0.32-preempt_mns16-during.prom").read_text()


def unknown_page(mb: float) -> str:
    """A real page followed by a LoRA-info-like family whose labels differ on every line."""
    out, size, i = [], 0, 0
    while size < mb * 1e6:
        line = (
            f'vllm:lora_requests_info{{max_lora="8",running_lora_adapters="adapter-{i:07d}",'
            f'waiting_lora_adapters="w{i}",engine="0"}} 1.7e9\n'
        )
        out.append(line)
        size += len(line)
        i += 1
    return PAGE + "# TYPE vllm:lora_requests_info gauge\n" + "".join(out)


def bench_unknown(rows: list[list[str]], mb: float) -> None:
    text = unknown_page(mb)
    times = []
    for k in range(3):
        t0 = time.process_time()
        snap = parse_page(text, float(k))
        times.append(time.process_time() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rows.append(
        [
            f"a {len(text) / 1e6:.0f} MB page, {snap.skipped.get('not_read', 0):,} samples of an unread family",
            f"{min(times):.2f} s CPU per parse",
            f"peak RSS {peak:.0f} MiB",
        ]
    )


def bench_churn(rows: list[list[str]], cycles: int) -> None:
    clock = ReplayClock(1000.0)
    adv = Advisor(Config(), load_rules(), clock=clock)
    proc = psutil.Process()
    marks = []
    t0 = time.process_time()
    for i in range(cycles):
        clock.t += 1
        extra = []
        for j in range(50):
            pod = f"{i}-{j}"
            for le in ("0.1", "1.0", "+Inf"):
                extra.append(
                    f'vllm:time_to_first_token_seconds_bucket{{engine="0",model_name="m",pod="{pod}",le="{le}"}} {i}'
                )
            extra.append(
                f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="m",pod="{pod}"}} {i}'
            )
            extra.append(f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="m",pod="{pod}"}} {i}')
        adv.on_page(PAGE + "\n".join(extra) + "\n", clock.t)
        if i % 20 == 0:
            adv.diagnose(clock.t)
        if (i + 1) % (cycles // 3) == 0:
            gc.collect()
            marks.append((i + 1, time.process_time() - t0, proc.memory_info().rss / 2**20))
    per = [f"{n} pages: {cpu / n * 1000:.1f} ms/page, RSS {rss:.0f} MiB" for n, cpu, rss in marks]
    rows.append(["50 new histogram series a page (labels that change)", "; ".join(per), ""])


def bench_braces(rows: list[list[str]]) -> None:
    out = []
    for kb in (14, 28, 56):
        n = kb * 1000 // 7
        line = "INFO 11-30 10:00:00 [utils.py:1] non-default args: " + "{'a': " * n + "1" + "}" * n
        t0 = time.process_time()
        logs.parse_line(line)
        out.append(f"{kb} KB: {time.process_time() - t0:.2f} s")
    rows.append(["a log line of nested braces after `non-default args:`", ", ".join(out), ""])


def bench_pathological(rows: list[list[str]], tmp: Path) -> None:
    """Lines and files that once backtracked or expanded (tests/test_fuzz.py reads them for
    correctness): CPU seconds each, beside what they took before their fixes."""
    banner = [
        "INFO 11-30 10:00:00 [api_server.py:1] ▄▄ █ model a" + " " * 65000 + "b",
        "INFO 11-30 10:00:00 [loggers.py:1] Engine 000: Avg prompt throughput:" + " " * 65000 + "x",
        "Iteration(1): " + "1" * 65000,
    ]
    worst = 0.0
    for line in banner:
        t0 = time.process_time()
        logs.parse_line(line)
        worst = max(worst, time.process_time() - t0)
    rows.append(
        [
            "a 64 KB banner or stats line with long runs of spaces",
            f"{worst:.3f} s CPU (worst of 3)",
            "before: 2-16 s",
        ]
    )
    worst = 0.0
    for line in ("a:" * 32000, "a=" * 32000, "http://" * 9000, "note: note: " * 5000):
        t0 = time.process_time()
        redact_text(line)
        worst = max(worst, time.process_time() - t0)
    rows.append(["redacting a 64 KB line of nested keys", f"{worst:.3f} s CPU (worst of 4)", "before: 2-7 s"])
    levels = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        levels.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    (tmp / "bomb.yaml").write_text("\n".join(levels) + "\nid: bomb\nwhen: *a9\n")
    t0 = time.process_time()
    with contextlib.suppress(RuleError):
        load_rules(tmp)
    rows.append(["a billion-laughs rules file", f"{time.process_time() - t0:.3f} s CPU to refuse", ""])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        bench_pathological(rows, Path(tmp))
    bench_braces(rows)
    bench_churn(rows, 300 if args.quick else 1500)
    bench_unknown(rows, 5 if args.quick else 30)
    print("| input | cost | memory |")
    print("|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
