"""Issue 14: bench results as users paste them: the printed "Serving Benchmark Result" table,
a --save-result file without --save-detailed, JSON under the command that was run. The forms
are derived from the real H200 0.25 detailed results by tests/fixtures/paste/bench/make_forms.py,
which renders them with vLLM's own print format."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from advisor.verify import bench, comparison, samples, verdict
from tests.paths import FIXTURES

REAL = FIXTURES / "bench" / "h200-vllm-0.25"
FORMS = FIXTURES / "paste" / "bench"
KNOB = ("max_num_batched_tokens", "decrease")


def _compare(
    a: Path, b: Path, knob: tuple[str, str] | None = KNOB, target: str | None = None
) -> comparison.Comparison:
    if knob is None:
        return comparison.compare_bench_files(a, b, target=target)
    return comparison.compare_bench_files(
        a, b, target=target or verdict.targets_for_knob(*knob), guards=verdict.guards_for_knob(*knob)
    )


def test_the_table_reads_every_printed_row() -> None:
    run = bench.load_bench(FORMS / "C_b2048-table.txt")
    real = json.loads(gzip.decompress((REAL / "C_b2048" / "bench.json.gz").read_bytes()))
    assert (run.completed, run.failed, run.max_concurrency) == (160, 0, 32)
    assert run.num_prompts == 160  # from the command above the table (and completed + failed)
    assert run.model_id == "/models/llama-8b-shaped"
    assert run.duration_s == pytest.approx(real["duration"], abs=0.005)
    assert run.output_throughput == pytest.approx(real["output_throughput"], abs=0.005)
    for key in ("mean_ttft_ms", "median_itl_ms", "p95_itl_ms", "p99_e2el_ms", "p90_tpot_ms"):
        assert run.aggregates[key] == pytest.approx(real[key], abs=0.005), key
    assert run.rows == ()


@pytest.mark.parametrize(
    ("knob", "target", "want"),
    [
        (KNOB, None, "keep"),  # the rule's target: ITL p95 242 -> 68 ms, no guard broken
        (None, None, "inconclusive"),  # no target: ITL p50 rose as ITL p95 fell, a trade-off
    ],
)
def test_table_and_summary_give_the_detailed_verdict(
    knob: tuple[str, str] | None, target: str | None, want: str
) -> None:
    detailed = _compare(REAL / "C_b16384" / "bench.json.gz", REAL / "C_b2048" / "bench.json.gz", knob, target)
    table = _compare(FORMS / "C_b16384-table.txt", FORMS / "C_b2048-table.txt", knob, target)
    summary = _compare(FORMS / "C_b16384-summary.json", FORMS / "C_b2048-summary.json", knob, target)
    assert detailed.verdict == table.verdict == summary.verdict == want
    assert detailed.overall is not None and table.overall is not None and summary.overall is not None
    for name in ("itl_p95", "ttft_p50", "output_throughput"):
        assert table.overall.metrics[name].a == pytest.approx(detailed.overall.metrics[name].a, rel=0.01)
    assert any("no per-request bootstrap is possible" in r for r in table.reasons)
    assert not any("no per-request bootstrap" in r for r in detailed.reasons)
    # the summary file has spreads (std_*): intervals; the table has none: the noise floor decides
    assert summary.overall.metrics["itl_p95"].ci_low is not None
    assert (
        table.overall.metrics["itl_p95"].ci_low is None
        and "noise floor" in table.overall.metrics["itl_p95"].note
    )


def test_a_default_table_compares_medians_p99s_and_means_and_says_what_it_lacks() -> None:
    """vLLM's default percentiles (P99 only): the ITL p95 target cannot be judged; P99 and
    mean rows are compared, and a P99 target decides."""
    c = _compare(FORMS / "C_b16384-table-p99.txt", FORMS / "C_b2048-table-p99.txt")
    assert c.verdict == "inconclusive"
    assert any("ITL p95 was not measured" in r for r in c.reasons)
    assert c.overall is not None
    assert {"itl_p99", "itl_mean", "ttft_p99", "ttft_mean", "itl_p50"} <= set(c.overall.metrics)
    c99 = _compare(FORMS / "C_b16384-table-p99.txt", FORMS / "C_b2048-table-p99.txt", target="itl_p99")
    assert c99.overall is not None and c99.overall.metrics["itl_p99"].direction == "better"


def test_json_under_the_command_that_was_run(tmp_path: Path) -> None:
    summary = (FORMS / "C_b2048-summary.json").read_text()
    pasted = tmp_path / "pasted.txt"
    pasted.write_text(
        "$ vllm bench serve --model /models/llama-8b-shaped --num-prompts 160 --max-concurrency 32 \\\n"
        "    --save-result --result-filename out.json\n" + summary
    )
    run = bench.load_bench(pasted)
    assert run.completed == 160 and run.model_id == "/models/llama-8b-shaped"
    assert run.aggregates["p95_itl_ms"] == pytest.approx(68.367, abs=0.001)


def test_two_models_get_a_warning(tmp_path: Path) -> None:
    other = json.loads((FORMS / "C_b2048-summary.json").read_text())
    other["model_id"] = "/models/other-model"
    b = tmp_path / "b.json"
    b.write_text(json.dumps(other))
    c = _compare(FORMS / "C_b16384-summary.json", b)
    assert c.reasons[0].startswith("Warning: A and B ran against different models")
    same = _compare(FORMS / "C_b16384-summary.json", FORMS / "C_b2048-summary.json")
    assert not any("different models" in r for r in same.reasons)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello\nworld\n", "neither JSON nor a printed"),
        ("{not json", "not valid JSON"),
        (
            "============ Serving Benchmark Result ============\nBenchmark duration (s): 3.0\n",
            "Successful requests",
        ),
        ('$ vllm bench serve --model m\n{"completed": 1,', "not valid"),
    ],
)
def test_what_is_not_a_result_fails_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "x.txt"
    f.write_text(text)
    with pytest.raises(samples.ExperimentError, match=message) as e:
        bench.load_bench(f)
    assert str(f) in str(e.value)


def test_a_saved_json_against_a_pasted_table_compares_what_both_report() -> None:
    """A detailed file (per-request values) against the other run's printed table: both are
    compared on their reported percentiles; the verdict is the detailed pair's."""
    mixed = _compare(REAL / "C_b16384" / "bench.json.gz", FORMS / "C_b2048-table.txt")
    assert mixed.load.same, mixed.reasons
    assert mixed.verdict == "keep"
    assert mixed.overall is not None and mixed.overall.metrics["itl_p95"].method == "summary"
