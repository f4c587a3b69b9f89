"""Data the advisor cannot trust is never read as calm (issue 23, class 1).

The pages are the bundled recording of a real vLLM 0.25 server on an H200 (`h200-A_s256`: 217
requests waiting, the KV cache ~97% full from its 16th page on). A run is continued past the
recording by replaying its loaded pages 2 s apart (counters carried on, as scripts/bench.py
does), so that the evaluation window (120 s) holds only the changed pages:

- every counter reads NaN: before, the server was called "healthy" once the window held only
  NaN pages;
- the counters and histograms stop moving while the queue stays (a stalled engine): "healthy"
  once the window held only the stall; now "inconclusive", named: engine stalled;
- the request gauges read NaN; histogram counts read +Inf (taken as a good page before: NaN
  predictions, bare `NaN` in the JSON, an IndexError in the candidate choice).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest

from advisor.cli.common import DEMO_SESSION
from advisor.core import names
from advisor.core.config import Config
from advisor.core.model import Family
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.drive.runner import Advisor, ReplayClock, export_state
from advisor.outputs.exporter import make_registry
from advisor.sources.metrics import parse_page
from advisor.sources.session import Session

RULES = load_rules()
PAGES = list(Session.load(DEMO_SESSION).iter_scrapes())
LOADED = range(16, 30)  # pages with the queue full (217 waiting, KV ~97%)
COUNTER_RE = re.compile(r"^((?:vllm:\w+|process_cpu_seconds)_total(?:\{[^}\n]*\})?) (\S+)$", re.M)
HIST_RE = re.compile(r"^(vllm:\w+_(?:bucket|count|sum)(?:\{[^}\n]*\})?) (\S+)$", re.M)


def _values(text: str, pattern: re.Pattern[str]) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in pattern.finditer(text)}


def continued(extra_pages: int = 90) -> Iterator[tuple[float, str]]:
    """The recording up to its loaded part, then the loaded pages again and again, 2 s apart,
    with every counter and histogram carried on from where the last page left it."""
    yield from PAGES[: LOADED.stop]
    t = PAGES[LOADED.stop - 1][0]
    offset: dict[str, float] = {}
    last = {**_values(PAGES[LOADED.stop - 1][1], COUNTER_RE), **_values(PAGES[LOADED.stop - 1][1], HIST_RE)}
    loop = [PAGES[i][1] for i in LOADED]
    first = {**_values(loop[0], COUNTER_RE), **_values(loop[0], HIST_RE)}
    for k in range(extra_pages):
        text = loop[k % len(loop)]
        if k % len(loop) == 0:  # a new loop starts from where the last one ended
            offset = {h: last[h] - first.get(h, 0.0) for h in last}

        def carry(m: re.Match[str], offset: dict[str, float] = offset) -> str:
            v = float(m.group(2)) + offset.get(m.group(1), 0.0)
            last[m.group(1)] = v
            return f"{m.group(1)} {v!r}"

        text = HIST_RE.sub(carry, COUNTER_RE.sub(carry, text))
        t += 2.0
        yield t, text


def run(mutate: Callable[[int, str], str], n: int = 90) -> tuple[Advisor, list[Diagnosis]]:
    clock = ReplayClock()
    adv = Advisor(Config(), RULES, clock=clock)
    out = []
    for i, (t, text) in enumerate(continued(n)):
        clock.t = t
        adv.on_page(mutate(i, text), t)
        out.append(adv.diagnose(t))
    return adv, out


def valid_json(d: Diagnosis) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(d.to_json(), allow_nan=False))
    return out


def exported(adv: Advisor, d: Diagnosis) -> str:
    """The daemon's /metrics page for this state."""
    return generate_latest(make_registry(lambda: export_state(adv, tuple(RULES), d))).decode()


def _value(page: str, series: str) -> float | None:
    for line in page.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def numbers(obj: Any) -> Iterator[float]:
    if isinstance(obj, float):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from numbers(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from numbers(v)


def test_the_continued_recording_is_advice_throughout_its_load() -> None:
    """The baseline: unchanged, the run advises (the KV cache is full and vLLM preempts)."""
    adv, ds = run(lambda i, t: t)
    assert {d.status for d in ds[-60:]} == {"advice"}
    assert adv.stats.bad_samples == {} and adv.window.restart_times() == []


AFTER = LOADED.stop + 5  # pages changed from here on


def nan_counters(i: int, text: str) -> str:
    return COUNTER_RE.sub(lambda m: f"{m.group(1)} NaN", text)


def test_nan_counters_are_never_healthy() -> None:
    """Every counter NaN from the first page: "healthy" 8 times before (and advice on what was
    left); now inconclusive, and the reason says which readings were not read."""
    adv, ds = run(nan_counters)
    assert "healthy" not in {d.status for d in ds}
    last = ds[-1]
    assert last.status == "inconclusive" and last.recommendation is None
    assert "could not be trusted" in last.reason and "non finite" in last.reason, last.reason
    assert adv.stats.scrapes.get("bad_sample", 0) == len(ds)
    assert adv.stats.bad_samples.get("non_finite", 0) > 0
    valid_json(last)
    page = exported(adv, last)
    assert (
        _value(page, 'vllm_advisor_bad_samples_total{reason="non_finite"}')
        == adv.stats.bad_samples["non_finite"]
    )
    assert _value(page, 'vllm_advisor_status{status="inconclusive"}') == 1.0


def frozen(i: int, text: str, _first: dict[str, str] = {}) -> str:  # noqa: B006 - the page frozen at
    """From AFTER on, every counter and histogram stands still; the gauges (217 waiting) move."""
    if i < AFTER:
        return text
    if not _first or i == AFTER:
        _first.clear()
        _first.update({m.group(1): m.group(2) for p in (COUNTER_RE, HIST_RE) for m in p.finditer(text)})
    for p in (COUNTER_RE, HIST_RE):
        text = p.sub(lambda m: f"{m.group(1)} {_first.get(m.group(1), m.group(2))}", text)
    return text


def test_a_stalled_engine_is_a_finding_never_healthy_never_advice() -> None:
    adv, ds = run(frozen)
    assert not {d.status for d in ds[AFTER:]} & {"healthy"}
    late = ds[AFTER + 20 :]  # 40 s into the stall
    assert all(d.status == "inconclusive" and d.recommendation is None for d in late)
    last = ds[-1]
    assert last.reason.startswith("engine stalled: ") and " waiting" in last.reason
    assert last.signals["engine_stalled_seconds"] is not None and last.signals["engine_stalled_seconds"] >= 30
    stalled_for = _value(
        exported(adv, last), 'vllm_advisor_engine_stalled_seconds{model_name="/models/llama-8b-shaped"}'
    )
    assert stalled_for == last.signals["engine_stalled_seconds"]


def nan_gauges(i: int, text: str) -> str:
    if i < AFTER:
        return text
    return re.sub(
        r"^(vllm:(?:num_requests_waiting|num_requests_running|kv_cache_usage_perc)\{[^}\n]*\}) \S+$",
        r"\1 NaN",
        text,
        flags=re.M,
    )


def test_nan_gauges_are_never_healthy() -> None:
    adv, ds = run(nan_gauges)
    assert "healthy" not in {d.status for d in ds[AFTER:]}
    assert adv.stats.bad_samples.get("non_finite", 0) > 0


@pytest.mark.parametrize(
    "pattern",
    [
        r"^(vllm:\w+_count(?:\{[^}\n]*\})?) \S+$",  # +Inf histogram counts
        r"^(vllm:\w+_bucket(?:\{[^}\n]*\})?) \S+$",  # +Inf buckets
    ],
)
def test_infinite_histogram_counts_are_bad_samples_and_every_prediction_is_a_number(pattern: str) -> None:
    """Before: a good page ("success"), NaN predictions, bare NaN in the JSON API, and in process
    an IndexError in the candidate choice."""

    def inf(i: int, text: str) -> str:
        return re.sub(pattern, r"\1 +Inf", text, flags=re.M) if i >= AFTER else text

    adv, ds = run(inf)  # no exception anywhere (IndexError in the candidate choice before)
    assert adv.stats.scrapes.get("bad_sample", 0) >= len(ds) - AFTER
    for d in ds:
        data = valid_json(d)
        assert all(math.isfinite(x) for x in numbers(data))
        if d.recommendation is not None and d.recommendation.predicted is not None:
            assert all(math.isfinite(x) for x in numbers(d.recommendation.predicted))
    assert "healthy" not in {d.status for d in ds[AFTER:]}


def test_a_page_rebuilt_from_prometheus_is_checked_as_a_parsed_one() -> None:
    """Fleet mode and `explain --prometheus` build snapshots from Prometheus's samples, not from
    a page: their readings pass the same checks (a NaN Prometheus stored is a bad sample, never a
    number in the window)."""
    clock = ReplayClock()
    adv = Advisor(Config(), RULES, clock=clock)
    for i, (t, text) in enumerate(PAGES[:20]):
        clock.t = t
        snap = parse_page(text, t)
        if i >= 10:
            fam = snap.families[names.GENERATION_TOKENS]
            bad = Family(fam.name, fam.type, fam.help, dict.fromkeys(fam.series, math.nan), fam.source_name)
            snap = replace(snap, families={**snap.families, names.GENERATION_TOKENS: bad})
        assert adv.on_snapshot(snap)
    assert adv.stats.bad_samples.get("non_finite") == 10 and adv.stats.scrapes["bad_sample"] == 10
    for _, v in adv.window.totals(names.GENERATION_TOKENS):
        assert v is None or math.isfinite(v)
