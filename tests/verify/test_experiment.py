"""Before/after comparison: real vLLM bench files (H200 0.25, CPU 0.32) and hand-made histograms.

The bench fixtures in tests/fixtures/bench/ are the team's real captures (vLLM 0.25 on an H200, 0.32 on
CPU; ``generated_texts`` dropped, JSON gzipped; the H200 ``itls`` stay in their sibling ``itls_ms.json.gz``).
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import math
import random
from pathlib import Path

import pytest

from advisor.core.model import Histogram
from advisor.outputs.comparison import render_text
from advisor.verify.bench import BenchRun, load_bench, parse_bench
from advisor.verify.comparison import (
    LoadCheck,
    compare_bench_files,
    compare_runs,
    compare_windows,
    default_edges,
    parse_buckets,
    same_load,
)
from advisor.verify.differences import compare_metric, quantile
from advisor.verify.samples import (
    METRICS,
    CountSample,
    ExperimentError,
    HistogramSample,
    ScalarSample,
    Settings,
    SummarySample,
    ValuesSample,
)
from advisor.verify.verdict import parse_targets, targets_for_knob
from tests.paths import FIXTURES

BENCH = FIXTURES / "bench"
H200 = BENCH / "h200-vllm-0.25"
CPU = BENCH / "cpu-vllm-0.32"
C16K = H200 / "C_b16384" / "bench.json.gz"
C2K = H200 / "C_b2048" / "bench.json.gz"
A256 = H200 / "A_s256" / "bench.json.gz"
MNS16 = CPU / "preempt_mns16" / "bench.json.gz"
MNS8 = CPU / "preempt_mns8" / "bench.json.gz"
SPEC = {m.name: m for m in METRICS}


def raw(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def preemptions_during(folder: Path) -> float:
    """vllm:num_preemptions_total at the end of the run minus at its start, from sampler.csv."""
    with (folder / "sampler.csv").open() as f:
        rows = list(csv.DictReader(f))
    return float(rows[-1]["num_preemptions_total"]) - float(rows[0]["num_preemptions_total"])


# ----------------------------------------------------------------------------- loading


def test_load_h200_reads_sibling_itls_and_matches_vllm_aggregates() -> None:
    run = load_bench(C2K)
    data = raw(C2K)
    assert "itls" not in data  # the ITLs really come from the sibling file
    assert len(run.rows) == data["num_prompts"] == 160
    assert all(r.ok for r in run.rows)
    assert run.max_concurrency == 32 and math.isinf(run.request_rate or 0)
    ttfts = sorted(r.ttft_s for r in run.rows if r.ttft_s is not None)
    assert quantile(ttfts, 0.5) * 1000 == pytest.approx(data["p50_ttft_ms"], rel=1e-9)
    # TPOT = (latency - ttft) / (output_len - 1), with latency rebuilt from the ITLs (0.01 ms precision)
    tpots = [r.tpot_s for r in run.rows if r.tpot_s is not None]
    assert sum(tpots) / len(tpots) * 1000 == pytest.approx(data["mean_tpot_ms"], rel=1e-4)
    pooled = sorted(x for r in run.rows for x in r.itls_s or ())
    assert quantile(pooled, 0.95) * 1000 == pytest.approx(data["p95_itl_ms"], rel=1e-3)
    assert run.rows[0].itls_s is not None and run.rows[0].itls_s[0] == pytest.approx(0.04188)
    assert run.rows[0].start_time == pytest.approx(data["start_times"][0])


def test_load_cpu_file_without_per_request_ttfts() -> None:
    run = load_bench(MNS16)
    assert len(run.rows) == 64
    assert all(r.ttft_s is None and r.prompt_len is None and r.e2e_s is not None for r in run.rows)
    assert run.aggregates["p50_ttft_ms"] == pytest.approx(19889.84683300032)


def test_load_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ExperimentError, match="does not exist"):
        load_bench(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ExperimentError, match="not valid"):
        load_bench(bad)
    lst = tmp_path / "list.json"
    lst.write_text("[1, 2]")
    with pytest.raises(ExperimentError, match="not a vllm bench result"):
        load_bench(lst)
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(ExperimentError, match="not a vllm bench result"):
        load_bench(other)
    data = raw(C2K)
    data["ttfts"] = data["ttfts"][:10]
    short = tmp_path / "short.json"
    short.write_text(json.dumps(data))
    with pytest.raises(ExperimentError, match="different lengths"):
        load_bench(short)
    with pytest.raises(ExperimentError, match=r"ITL file .* does not exist"):
        load_bench(C2K, itls_path=tmp_path / "missing_itls.json.gz")
    data = raw(C2K)
    data["ttfts"][3] = "fast"
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(data))
    with pytest.raises(ExperimentError, match=r"ttfts\[3\] is not a number"):
        load_bench(wrong)


def test_failed_requests_are_excluded(tmp_path: Path) -> None:
    data = raw(C2K)
    data["errors"][0] = "Bad Request"
    run = parse_bench(
        data, itls_ms=json.loads(gzip.decompress((H200 / "C_b2048" / "itls_ms.json.gz").read_bytes()))
    )
    assert not run.rows[0].ok and len(run.ok_rows) == 159


# ----------------------------------------------------------------------------- real verdicts


def test_mnbt_decrease_16384_to_2048_is_kept_on_itl_p95() -> None:
    c = compare_bench_files(C16K, C2K, target="itl_p95")
    assert c.verdict == "keep"
    itl = c.overall.metrics["itl_p95"] if c.overall else None
    assert itl is not None and itl.direction == "better"
    assert itl.a == pytest.approx(0.242, rel=0.01) and itl.b == pytest.approx(0.0684, rel=0.01)
    assert itl.ci_high is not None and itl.ci_high < -0.05
    # guards stay within noise or 10%
    for g in ("ttft_p50", "ttft_p95", "output_throughput"):
        d = c.overall.metrics[g] if c.overall else None
        assert d is not None and d.worse_by() <= 0.10
    assert any("ITL p95 242 ms -> 68.4 ms (-72%" in r for r in c.reasons)
    assert c.load.same


def test_mnbt_increase_2048_to_16384_is_reverted() -> None:
    c = compare_bench_files(C2K, C16K, target="itl_p95")
    assert c.verdict == "revert"
    assert any(r.startswith("Target got worse: ITL p95 68.4 ms -> 242 ms") for r in c.reasons)


def test_different_load_is_refused_naming_what_differs() -> None:
    c = compare_bench_files(A256, C2K)
    assert c.verdict == "inconclusive" and not c.load.same and c.overall is None
    text = " ".join(c.reasons)
    for phrase in (
        "number of prompts differs: 400 vs 160",
        "max concurrency differs: 256 vs 32",
        "prompt length median",
    ):
        assert phrase in text
    assert "Refused" in render_text(c)


def test_cpu_max_num_seqs_16_to_8_reverted_despite_fewer_preemptions() -> None:
    """Bench files carry no preemption count: the target comes from the server's counter
    (sampler.csv, vllm:num_preemptions_total), the guards from the bench files."""
    pre = (preemptions_during(CPU / "preempt_mns16"), preemptions_during(CPU / "preempt_mns8"))
    assert pre == (48.0, 1.0)
    c = compare_bench_files(MNS16, MNS8, target="preemptions", preemptions=pre)
    assert c.verdict == "revert"
    m = c.overall.metrics if c.overall else {}
    assert m["preemptions"].direction == "better"
    assert m["ttft_p50"].direction == "worse" and m["ttft_p50"].method == "summary"
    assert m["ttft_p50"].change == pytest.approx(29830.027511499793 / 19889.84683300032 - 1)
    assert any("TTFT p50 19.9 s -> 29.8 s (+50%" in r for r in c.reasons)
    assert any(r.startswith("Target improved: Preemptions 48 -> 1") for r in c.reasons)
    assert c.bucket_note.startswith("one bucket: the files carry no per-request prompt lengths")


def test_cpu_without_preemption_counts_says_target_unmeasured() -> None:
    c = compare_bench_files(MNS16, MNS8, target="preemptions")
    assert c.verdict == "revert"  # the TTFT p50 guard still breaks
    assert any("Preemptions was not measured" in r and "num_preemptions_total" in r for r in c.reasons)


def test_identical_runs_are_inconclusive() -> None:
    run = load_bench(C2K)
    c = compare_runs(run, run)
    assert c.verdict == "inconclusive"
    assert c.overall is not None and not any(d.significant for d in c.overall.metrics.values())
    c2 = compare_runs(run, run, target="itl_p95")
    assert c2.verdict == "inconclusive" and any("within noise" in r for r in c2.reasons)


def _synthetic(seed: int, n: int = 400, tokens: int = 500, lens: tuple[int, int] = (100, 4000)) -> BenchRun:
    r = random.Random(seed)
    return parse_bench(
        {
            "num_prompts": n, "completed": n, "failed": 0, "duration": 60.0, "max_concurrency": 64,
            "request_rate": "inf", "output_throughput": 3000.0, "request_throughput": 6.0,
            "input_lens": [r.randint(*lens) for _ in range(n)], "output_lens": [tokens] * n,
            "ttfts": [r.lognormvariate(-1, 0.5) for _ in range(n)],
            "itls": [[r.lognormvariate(-4, 0.3) for _ in range(tokens - 1)] for _ in range(n)],
            "errors": [""] * n,
        },
        source=f"synthetic-{seed}",
    )  # fmt: skip


def test_a_gain_beyond_the_targets_with_nothing_worse_is_kept() -> None:
    """Under open arrivals a server that keeps up serves no more tokens however it is tuned: a
    change that admits more cuts the wait instead (follow-long's KV raise on an H100: preemptions
    and throughput, its targets, within noise; TTFT p95 5.1 s -> 2.0 s). Kept, saying so; where
    nothing moved it stays inconclusive."""
    a = _synthetic(1)
    r = random.Random(3)
    b = dataclasses.replace(
        _synthetic(2),
        rows=[dataclasses.replace(row, ttft_s=r.lognormvariate(-2.5, 0.5)) for row in _synthetic(2).rows],
    )
    c = compare_runs(a, b, target="output_throughput")
    assert c.verdict == "keep", c.reasons
    assert any(x.startswith("Target within noise: Output throughput") for x in c.reasons)
    assert any(x.startswith("Improved beyond its targets: TTFT p50") for x in c.reasons)
    assert compare_runs(a, _synthetic(2), target="output_throughput").verdict == "inconclusive"


def test_same_distribution_different_draws_is_inconclusive() -> None:
    """(Its cost, 400 requests x 500 ITLs, is not timed here: timings belong in scripts/bench.py.)"""
    a, b = _synthetic(1), _synthetic(2)
    c = compare_runs(a, b)
    assert c.verdict == "inconclusive"
    assert len(c.buckets) == 3 and c.bucket_note.startswith("buckets at the pooled prompt-length terciles")


def test_comparison_is_deterministic_and_json_clean() -> None:
    a, b = load_bench(C16K), load_bench(C2K)
    j1 = compare_runs(a, b, target="itl_p95").to_json()
    j2 = compare_runs(a, b, target="itl_p95").to_json()
    assert j1 == j2
    text = json.dumps(j1, allow_nan=False)
    assert json.loads(text)["verdict"] == "keep"
    m = j1["overall"]["metrics"]["itl_p95"]
    assert set(m) >= {"a", "b", "change_pct", "ci_low_pct", "ci_high_pct", "significant"}
    assert j1["buckets"][0]["range"] == "all" and j1["buckets"][0]["n_a"] == 160


def test_too_few_requests_is_inconclusive() -> None:
    a, b = load_bench(C16K), load_bench(C2K)
    a10 = dataclasses.replace(a, rows=a.rows[:10])
    b10 = dataclasses.replace(b, rows=b.rows[:10])
    c = compare_runs(a10, b10, target="itl_p95")
    assert c.verdict == "inconclusive"
    assert "Too few requests" in c.reasons[0] and "A has 10" in c.reasons[0]


def test_explicit_buckets_split_by_prompt_length_and_flag_small_buckets() -> None:
    c = compare_bench_files(C16K, C2K, buckets="6000", target="itl_p95")
    assert [bk.label for bk in c.buckets] == ["<6000", ">=6000"]
    assert sum(bk.n_a for bk in c.buckets) == 160
    assert c.verdict == "keep"
    c2 = compare_bench_files(C16K, C2K, buckets="5500,6500")
    small = [bk for bk in c2.buckets if min(bk.n_a, bk.n_b) < 20]
    assert small and all(bk.status == "insufficient" for bk in small)
    assert all(not d.significant for bk in small for d in bk.metrics.values())


def test_default_edges_single_bucket_for_near_constant_lengths_else_terciles() -> None:
    edges, note = default_edges(load_bench(C16K), load_bench(C2K))
    assert edges == () and "nearly constant" in note
    edges, note = default_edges(_synthetic(1, n=60, tokens=3), _synthetic(2, n=60, tokens=3))
    assert len(edges) == 2 and "terciles" in note
    assert all(e == float(f"{e:.2g}") for e in edges)


def test_same_load_tolerances() -> None:
    a = load_bench(C2K)
    ok, reasons = same_load(a, a)
    assert ok and reasons == []
    longer = dataclasses.replace(
        a,
        rows=tuple(dataclasses.replace(r, prompt_len=int((r.prompt_len or 0) * 1.12)) for r in a.rows),
    )
    ok, reasons = same_load(a, longer)
    assert not ok and any("prompt length median differs" in r for r in reasons)
    slightly = dataclasses.replace(
        a,
        rows=tuple(dataclasses.replace(r, prompt_len=int((r.prompt_len or 0) * 1.05)) for r in a.rows),
    )
    assert same_load(a, slightly)[0]


def test_render_text_and_argument_parsing() -> None:
    c = compare_bench_files(C16K, C2K, target="itl_p95")
    text = render_text(c)
    assert text.startswith("Verdict: KEEP")
    assert "ITL p95" in text and "242 ms" in text and "request counts" in text
    assert parse_targets("itl_p95, tpot_p95") == ("itl_p95", "tpot_p95")
    assert parse_targets("itl_p99,ttft_mean") == ("itl_p99", "ttft_mean")  # summary metrics (issue 14)
    with pytest.raises(ExperimentError, match="unknown target metric itl_p42"):
        parse_targets("itl_p42")
    assert parse_buckets("2048,512") == (512.0, 2048.0)
    with pytest.raises(ExperimentError, match="must be numbers"):
        parse_buckets("512,big")
    with pytest.raises(ExperimentError, match="positive"):
        parse_buckets("-5")
    assert targets_for_knob("max_num_batched_tokens", "decrease") == ("itl_p95",)
    assert targets_for_knob("unknown", "increase") == ()


# ----------------------------------------------------------------------------- sample kinds


def _h(pairs: list[tuple[float, float]]) -> Histogram:
    return Histogram(tuple(pairs), pairs[-1][1], 0.0)


BEFORE = _h([(0.05, 10), (0.1, 50), (0.25, 90), (0.5, 100), (math.inf, 100)])
AFTER_LOWER = _h([(0.05, 60), (0.1, 95), (0.25, 100), (0.5, 100), (math.inf, 100)])


def test_histogram_difference_beyond_bucket_resolution_is_significant() -> None:
    d = compare_metric(SPEC["itl_p95"], HistogramSample(BEFORE), HistogramSample(AFTER_LOWER), Settings())
    assert d.a == pytest.approx(0.375) and d.b == pytest.approx(0.1)
    # worst case inside the buckets: B in (0.05, 0.1], A in (0.25, 0.5]
    assert d.ci_low == pytest.approx(0.05 / 0.5 - 1) and d.ci_high == pytest.approx(0.1 / 0.25 - 1)
    assert d.significant and d.direction == "better" and d.method == "histogram"


def test_histogram_difference_inside_one_bucket_is_noise() -> None:
    shifted = _h([(0.05, 10), (0.1, 50), (0.25, 85), (0.5, 100), (math.inf, 100)])
    d = compare_metric(SPEC["itl_p95"], HistogramSample(BEFORE), HistogramSample(shifted), Settings())
    assert d.change is not None and abs(d.change) >= 0.05  # a visible change...
    assert not d.significant  # ...that the bucket resolution cannot support


def test_histogram_adjacent_buckets_and_inf_bucket() -> None:
    # A's p95 in (0.1, 0.25], B's in (0.25, 0.5]: the intervals touch at 0.25 -> not significant
    a = _h([(0.1, 50), (0.25, 96), (0.5, 100), (math.inf, 100)])
    b = _h([(0.1, 50), (0.25, 94), (0.5, 100), (math.inf, 100)])
    d = compare_metric(SPEC["ttft_p95"], HistogramSample(a), HistogramSample(b), Settings())
    assert d.ci_low == pytest.approx(0.0) and not d.significant
    # rank in +Inf: quantile is the highest finite bound, and the upper side is unbounded
    c = _h([(0.1, 10), (0.25, 20), (0.5, 50), (math.inf, 100)])
    d2 = compare_metric(SPEC["ttft_p95"], HistogramSample(a), HistogramSample(c), Settings())
    assert d2.b == 0.5 and d2.ci_high is None and d2.ci_low == pytest.approx(0.5 / 0.25 - 1)
    assert d2.significant and d2.direction == "worse"


def test_histogram_with_few_observations_is_insufficient() -> None:
    few = _h([(0.05, 6), (0.1, 10), (math.inf, 10)])
    d = compare_metric(SPEC["itl_p95"], HistogramSample(BEFORE), HistogramSample(few), Settings())
    assert d.status == "insufficient" and not d.significant


def test_compare_windows_with_histograms() -> None:
    before = {
        "itl": HistogramSample(BEFORE),
        "ttft": HistogramSample(BEFORE),
        "output_throughput": ScalarSample(500),
    }
    after = {
        "itl": HistogramSample(AFTER_LOWER),
        "ttft": HistogramSample(BEFORE),
        "output_throughput": ScalarSample(490),
    }
    c = compare_windows(before, after, target="itl_p95")
    assert c.verdict == "keep" and c.overall is not None and c.overall.n_a == 100
    worse_ttft = {**after, "ttft": HistogramSample(_h([(0.5, 10), (1.0, 50), (2.5, 100), (math.inf, 100)]))}
    c2 = compare_windows(before, worse_ttft, target="itl_p95")
    assert c2.verdict == "revert" and any("TTFT p50" in r for r in c2.reasons)
    c3 = compare_windows(before, after, target="itl_p95", requests=(100, 5))
    assert c3.verdict == "inconclusive" and "Too few requests" in c3.reasons[0]
    c4 = compare_windows(before, after, load=LoadCheck(False, ("request rate 3.1/s vs 0.4/s",), {}, {}))
    assert c4.verdict == "inconclusive" and "request rate 3.1/s vs 0.4/s" in c4.reasons[0]


def test_counts_summaries_scalars() -> None:
    s = Settings()
    d = compare_metric(SPEC["preemptions"], CountSample(48, 64), CountSample(1, 64), s)
    assert d.significant and d.direction == "better" and d.ci_high is not None and d.ci_high < 0
    d0 = compare_metric(SPEC["preemptions"], CountSample(0, 64), CountSample(0, 64), s)
    assert d0.change == 0 and not d0.significant
    d1 = compare_metric(SPEC["preemptions"], CountSample(3, 64), CountSample(4, 64), s)
    assert not d1.significant  # 3 vs 4 events is noise
    same = SummarySample({0.5: 1.0, 0.95: 2.0}, 100, 0.5)
    near = SummarySample({0.5: 1.04, 0.95: 2.1}, 100, 0.5)
    assert not compare_metric(SPEC["ttft_p50"], same, near, s).significant
    # no spread reported (a printed table): no interval; a change counts beyond the noise floor
    no_std = SummarySample({0.5: 2.0}, 100, None)
    assert compare_metric(SPEC["ttft_p50"], same, no_std, s).significant
    near_no_std = SummarySample({0.5: 1.08}, 100, None)
    d_near = compare_metric(SPEC["ttft_p50"], same, near_no_std, s)
    assert not d_near.significant and "noise floor" in d_near.note
    t = compare_metric(SPEC["output_throughput"], ScalarSample(660.0), ScalarSample(560.0), s)
    assert t.significant and t.direction == "worse" and t.worse_by() == pytest.approx(100 / 660)
    mixed = compare_metric(SPEC["ttft_p50"], same, ValuesSample.of([1.0] * 30), s)
    assert mixed.status == "missing"


def test_values_bootstrap_detects_a_real_shift_and_respects_min_effect() -> None:
    r = random.Random(7)
    base = [r.lognormvariate(0, 0.3) for _ in range(300)]
    a = ValuesSample.of(base)
    shifted = ValuesSample.of(x * 1.3 for x in base)
    d = compare_metric(SPEC["ttft_p50"], a, shifted, Settings())
    assert d.significant and d.direction == "worse" and d.change == pytest.approx(0.3)
    assert d.ci_low is not None and d.ci_low > 0
    tiny = ValuesSample.of(x * 1.02 for x in base)
    d2 = compare_metric(SPEC["ttft_p50"], a, tiny, Settings(bootstrap=400))
    assert not d2.significant  # below the 5% minimum effect whatever the interval says
