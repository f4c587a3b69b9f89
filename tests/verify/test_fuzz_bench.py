"""Fuzzing (hypothesis) of `compare`'s bench reader on what users paste (issue 23): the printed
"Serving Benchmark Result" tables and the summaries of tests/fixtures/paste/bench (rendered by
vLLM's own print format from real H200 runs), mutated, with numbers out of every range put in
(400 digits, 1e308, inf, nan). Only ExperimentError comes out, never an OverflowError, and what
reads holds only finite numbers (the unlimited request rate aside)."""

from __future__ import annotations

import math
import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from advisor.verify import bench
from advisor.verify.samples import ExperimentError
from tests.fuzzing import fuzz, mutated
from tests.paths import FIXTURES

FORMS = FIXTURES / "paste" / "bench"
TEXTS = [p.read_text() for p in sorted(FORMS.glob("*.txt"))] + [
    p.read_text() for p in sorted(FORMS.glob("*.json"))
]
HOSTILE = ["9" * 400, "1e308", "-1e308", "inf", "nan", "-0", "1e-320", "0"]


@st.composite
def hostile_numbers(draw: Any) -> str:
    """A real table or summary with some of its numbers replaced by hostile ones."""
    text = draw(st.sampled_from(TEXTS))
    spots = [m.span() for m in re.finditer(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", text)]
    for _ in range(draw(st.integers(1, 4))):
        if not spots:
            break
        a, b = draw(st.sampled_from(spots))
        text = text[:a] + draw(st.sampled_from(HOSTILE)) + text[b:]
        spots = [m.span() for m in re.finditer(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", text)]
    return text


@fuzz(200)
@given(st.one_of(hostile_numbers(), mutated(TEXTS, spaces=200)))
def test_pasted_bench_results_only_raise_experiment_errors(text: str) -> None:
    """Inputs: the printed tables (with p99 rows too) and the JSON summaries, numbers replaced by
    400-digit integers, 1e308, inf, nan; or the texts cut, duplicated, characters swapped."""
    try:
        run = bench.parse_bench(bench.read_bench_text(text, "pasted"), source="pasted")
    except ExperimentError as e:
        assert str(e) and "Traceback" not in str(e)
        return
    for k, v in run.aggregates.items():
        assert math.isfinite(v) and abs(v) <= bench.MAX_VALUE, (k, v)
    for v in (run.duration_s, run.output_throughput, run.request_throughput, run.burstiness):
        assert v is None or (math.isfinite(v) and abs(v) <= bench.MAX_VALUE)
