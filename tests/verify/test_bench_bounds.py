"""Numbers out of every range in bench results (issue 23, class 3): a 400-digit integer in a
bench file (a count, a request's length, in JSON or in a printed table) and an aggregate of
1e308 (`std_tpot_ms`) give one clear error naming the file and the field, exit 1; they were an
unforeseen `OverflowError` (int too large to convert to float; a standard error squared).

Files are the real CPU bench result of tests/fixtures/sessions/cpu-healthy with one field
changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.verify import bench
from advisor.verify.samples import ExperimentError
from tests.paths import FIXTURES

REAL = FIXTURES / "sessions" / "cpu-healthy" / "bench.json"
BIG = int("9" * 400)


def _write(tmp_path: Path, name: str, change: dict[str, Any], drop_rows: bool = False) -> Path:
    doc = json.loads(REAL.read_text())
    if drop_rows:  # a --save-result file without --save-detailed: the aggregates are compared
        for k in ("ttfts", "itls", "input_lens", "output_lens", "latencies", "start_times", "errors"):
            doc.pop(k, None)
    for k, v in change.items():
        if k.endswith("[0]"):
            doc[k[:-3]][0] = v
        else:
            doc[k] = v
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


CASES = {
    "completed": ({"completed": BIG}, False, "completed"),
    "num_prompts": ({"num_prompts": BIG}, False, "num_prompts"),
    "input_lens": ({"input_lens[0]": BIG}, False, "input_lens[0]"),
    "ttfts": ({"ttfts[0]": 1e308}, False, "ttfts[0]"),
    "std_tpot_ms": ({"std_tpot_ms": 1e308, "mean_tpot_ms": 1e308}, True, "tpot_ms"),
    "p95_itl_ms": ({"p95_itl_ms": float("inf")}, True, "p95_itl_ms"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_compare_on_numbers_out_of_range_is_one_clear_error(tmp_path: Path, case: str) -> None:
    change, drop_rows, field = CASES[case]
    a = _write(tmp_path, "a.json", {}, drop_rows)
    b = _write(tmp_path, "b.json", change, drop_rows)
    res = CliRunner().invoke(main, ["compare", str(a), str(b)])
    assert res.exit_code == 1, res.output
    line = res.output.strip().splitlines()[-1]
    assert line.startswith("error: ") and "Overflow" not in line and "b.json" in line, line
    assert field in line and "out of range" in line and "9" * 40 not in line, line


def test_a_printed_table_with_a_400_digit_count_is_refused(tmp_path: Path) -> None:
    text = (
        "============ Serving Benchmark Result ============\n"
        f"Successful requests:                     {'9' * 400}\n"
        "Benchmark duration (s):                  10.00\n"
        "Mean TTFT (ms):                          12.5\n"
        "==================================================\n"
    )
    p = tmp_path / "table.txt"
    p.write_text(text)
    with pytest.raises(ExperimentError) as e:
        bench.load_bench(p)
    assert "completed" in str(e.value) and "out of range" in str(e.value)


def test_the_unlimited_request_rate_vllm_writes_still_reads(tmp_path: Path) -> None:
    """`vllm bench serve` writes request_rate "inf" for an unlimited rate: not out of range."""
    run = bench.load_bench(_write(tmp_path, "a.json", {"request_rate": "inf"}))
    assert run.request_rate == float("inf") and run.completed == json.loads(REAL.read_text())["completed"]


def test_a_requests_itls_are_read_in_one_pass_and_checked_one_by_one_when_odd() -> None:
    """The ITL lists (~10^5-10^6 numbers a run) take a one-pass path when they are plain finite
    numbers in range; the odd ones still give the error that names the request, or read as 0."""

    def itls(row: list[Any]) -> tuple[float, ...] | None:
        return bench.parse_bench({"completed": 1, "itls": [row]}, "b.json").rows[0].itls_s

    assert itls([0.01, 2, 0.03]) == (0.01, 2.0, 0.03)
    assert all(type(x) is float for x in itls([1, 2]) or ())
    assert itls([0.01, float("nan")]) == (0.01, 0.0)  # unknown: as before the fast path
    for odd, what in (
        (BIG, "out of range"),
        (1e308, "out of range"),
        (True, "not a number"),
        ("x", "not a number"),
    ):
        with pytest.raises(ExperimentError) as e:
            itls([0.01, odd])
        assert "itls[0]" in str(e.value) and what in str(e.value), e.value
