"""A page's samples that cannot be trusted are bad samples, skipped, counted by reason and named
(issue 23, classes 1 and 2), and a page's cost is bounded (class 3).

Every page here is a real vLLM 0.32 CPU page (tests/fixtures/pages) with one sample changed,
inserted where a server would print it:

- non-finite values (NaN, +Inf, -Inf) in counters, gauges and histogram buckets, counts and
  sums of the families the advisor reads: before, a NaN gauge and an infinite histogram count
  were read as numbers (a "success" scrape) and came out as NaN predictions and bare NaN in
  the JSON API;
- negative counters and duplicate series (one series twice with two values);
- histogram samples before their `# HELP` line without `# TYPE` (`explain --metrics-file`
  ended in a TypeError, the daemon's `up` fell every cycle);
- unknown families (dropped before their labels are read, counted) and caps on series.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.core import names
from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive.runner import Advisor, ReplayClock
from advisor.sources import metrics as m
from advisor.sources import promtext
from tests.pages import PAGES, page

BASE = page("cpu-0.32-preempt_mns16-during.prom")


def _line_of(text: str, prefix: str) -> tuple[int, int]:
    """Start and end of the first line of ``text`` starting with ``prefix``."""
    i = text.index("\n" + prefix) + 1
    return i, text.index("\n", i)


def replaced(prefix: str, value: str, text: str = BASE) -> str:
    """``text`` with the value of the first sample line starting with ``prefix`` replaced."""
    i, j = _line_of(text, prefix)
    head = text[i:j].rpartition(" ")[0]
    return text[:i] + head + " " + value + text[j:]


def inserted_after(prefix: str, line: str, text: str = BASE) -> str:
    _, j = _line_of(text, prefix)
    return text[: j + 1] + line + "\n" + text[j + 1 :]


NON_FINITE = [
    ("vllm:num_preemptions_total{", names.NUM_PREEMPTIONS),
    ("vllm:generation_tokens_total{", names.GENERATION_TOKENS),
    ("vllm:num_requests_waiting{", names.NUM_WAITING),
    ("vllm:kv_cache_usage_perc{", names.KV_CACHE_USAGE),
    ("vllm:time_to_first_token_seconds_bucket{", names.TTFT),
    ("vllm:time_to_first_token_seconds_count{", names.TTFT),
    ("vllm:time_to_first_token_seconds_sum{", names.TTFT),
]


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf"])
@pytest.mark.parametrize(("prefix", "family"), NON_FINITE, ids=[p for p, _ in NON_FINITE])
def test_a_non_finite_value_is_a_bad_sample_and_its_series_is_left_out(
    prefix: str, family: str, value: str
) -> None:
    snap = m.parse_page(replaced(prefix, value), t=0)
    (w,) = snap.warnings
    assert w.kind == "non_finite" and value.lstrip("+") in w.reason, w
    # the series (a histogram's whole series: its buckets and count go together) is not read
    assert not snap.has(family) or not snap.families[family].series
    fam = snap.families.get(family)
    for v in fam.series.values() if fam is not None else ():
        assert not isinstance(v, float) or math.isfinite(v)
    for other in (names.NUM_RUNNING, names.PROMPT_TOKENS, names.ITL):
        assert snap.has(other), other


@pytest.mark.parametrize(
    ("prefix", "value", "family"),
    [
        ("vllm:request_success_total{", "-3", names.REQUEST_SUCCESS),
        ("vllm:prompt_tokens_total{", "-1e3", names.PROMPT_TOKENS),
        ("vllm:inter_token_latency_seconds_bucket{", "-1", names.ITL),
    ],
)
def test_a_negative_counter_or_bucket_is_a_bad_sample(prefix: str, value: str, family: str) -> None:
    snap = m.parse_page(replaced(prefix, value), t=0)
    assert [w.kind for w in snap.warnings] == ["negative"], snap.warnings
    series = snap.families[family].series if snap.has(family) else {}
    assert all(not isinstance(v, float) or v >= 0 for v in series.values())


def test_a_duplicate_series_with_two_values_is_left_out_and_named() -> None:
    i, j = _line_of(BASE, "vllm:num_requests_waiting{")
    line = BASE[i:j]
    head, _, value = line.rpartition(" ")
    text = inserted_after("vllm:num_requests_waiting{", f"{head} {float(value) + 7}")
    snap = m.parse_page(text, t=0)
    (w,) = snap.warnings
    assert w.kind == "duplicate" and w.family == names.NUM_WAITING and "twice" in w.reason
    assert snap.total(names.NUM_WAITING) is None  # which one is true is unknown
    # the same series twice with the same value: read once, still named
    snap = m.parse_page(inserted_after("vllm:num_requests_waiting{", line), t=0)
    assert [w.kind for w in snap.warnings] == ["duplicate"] and snap.total(names.NUM_WAITING) == float(value)


def test_a_duplicate_bucket_is_left_out_with_its_series() -> None:
    prefix = "vllm:time_to_first_token_seconds_bucket{"
    i, j = _line_of(BASE, prefix)
    head = BASE[i:j].rpartition(" ")[0]
    snap = m.parse_page(inserted_after(prefix, head + " 12345"), t=0)
    assert [w.kind for w in snap.warnings] == ["duplicate"]
    assert snap.histogram(names.TTFT) is None


def _histogram_before_help(text: str, fam: str) -> str:
    """The family's samples moved above its `# HELP` line and its `# TYPE` line removed."""
    lines = text.splitlines()
    samples = [ln for ln in lines if ln.startswith(fam + "_")]
    rest = [ln for ln in lines if not ln.startswith(fam + "_") and not ln.startswith(f"# TYPE {fam} ")]
    at = next(k for k, ln in enumerate(rest) if ln.startswith(f"# HELP {fam} "))
    return "\n".join(rest[:at] + samples + rest[at:]) + "\n"


def test_histogram_samples_before_their_help_line_without_type_are_one_histogram(tmp_path: Path) -> None:
    """Issue 23 #2: `explain --metrics-file` ended in `TypeError: float() argument must be ...
    not 'Histogram'` (the empty family of the `# HELP` line replaced the histogram's type)."""
    text = _histogram_before_help(BASE, names.E2E)
    snap = m.parse_page(text, t=0)
    assert snap.families[names.E2E].type == "histogram" and snap.histogram(names.E2E) is not None
    assert snap.histogram(names.E2E) == m.parse_page(BASE, t=0).histogram(names.E2E)
    adv = Advisor(Config(), load_rules(), clock=ReplayClock(10.0))
    assert adv.on_page(text, 5.0) and adv.on_page(text.replace("vllm:e2e", "vllm:e2e"), 10.0)
    adv.diagnose(10.0)
    p = tmp_path / "page.prom"
    p.write_text(text)
    res = CliRunner().invoke(main, ["explain", "--metrics-file", str(p)])
    assert "TypeError" not in res.output and res.exit_code in (0, 4), res.output


def test_a_family_declared_twice_with_two_types_keeps_the_first() -> None:
    extra = '# TYPE vllm:num_requests_running histogram\nvllm:num_requests_running_bucket{le="+Inf"} 3\n'
    snap = m.parse_page(BASE + extra, t=0)
    assert snap.families[names.NUM_RUNNING].type == "gauge"
    assert [w.kind for w in snap.warnings] == ["type_conflict"]


# ------------------------------------------------------------------ class 3: a page's cost bounded
def test_unknown_families_are_dropped_before_their_labels_are_read_and_counted() -> None:
    """A page of mostly unknown `vllm:` series (a LoRA info gauge whose labels change with the
    load, another exporter): none is parsed into a series or remembered, each is counted."""
    extra = "".join(f'vllm:lora_thing{{adapter="a{i}",engine="0"}} 1\n' for i in range(5000))
    before = len(promtext._HEAD_CACHE)
    snap = m.parse_page(BASE + "# TYPE vllm:lora_thing gauge\n" + extra, t=0)
    assert "vllm:lora_thing" not in snap.families and snap.warnings == ()
    assert snap.skipped["not_read"] >= 5000
    assert len(promtext._HEAD_CACHE) - before < 100  # their labels were never parsed
    assert m.parse_page(BASE, t=0).skipped["not_read"] < 500  # vLLM's own unread families


def test_a_read_family_with_too_many_series_keeps_the_first_and_says_so() -> None:
    n = promtext.MAX_SERIES_PER_FAMILY + 500
    extra = "".join(f'vllm:num_requests_running{{engine="{i}",model_name="m"}} 1\n' for i in range(n))
    snap = m.parse_page(BASE + extra, t=0)
    assert len(snap.families[names.NUM_RUNNING].series) == promtext.MAX_SERIES_PER_FAMILY
    assert [w.kind for w in snap.warnings] == ["too_many_series"]
    assert snap.skipped["over_limit"] >= 500


def test_every_fixture_page_reads_without_bad_samples() -> None:
    """The checks are not noise: no real page of the fixtures has a bad sample."""
    for p in sorted(PAGES.glob("*.prom")):
        assert m.parse_page(p.read_text(), t=0).warnings == (), p.name
