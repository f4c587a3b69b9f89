"""Contradictory readings over time are bad samples, not restarts (issue 23, class 2), and labels
that change on every page cost bounded memory (class 3).

The pages are the bundled recording of a real vLLM 0.25 server on an H200 (39 pages, 76 s,
ending in advice), replayed through the advisor with one reading changed:

- a counter that jumps for one page and comes back, or goes down for one page, while the
  process start time stays: before, either was taken for an engine restart ("warming up",
  advice withheld for 30 s) and the jump counted as traffic;
- a series printed twice with two values, a negative counter: left out on that page;
- a real restart (a new process start time, counters from zero) is still a restart.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from advisor.cli.common import DEMO_SESSION
from advisor.core import names
from advisor.core.config import Config
from advisor.core.model import Family, Histogram, Snapshot, label_key
from advisor.derive import window as window_mod
from advisor.derive.window import Window
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.drive.runner import Advisor, ReplayClock
from advisor.sources.session import Session

RULES = load_rules()
PAGES = list(Session.load(DEMO_SESSION).iter_scrapes())
AT = 30  # the page changed: 16 s before the end, within the 30 s warm-up a restart would cause


def scaled(text: str, prefix: str, f: Callable[[float], float]) -> str:
    """Every sample line starting with ``prefix`` with its value v replaced by f(v)."""

    def sub(m: re.Match[str]) -> str:
        return f"{m.group(1)} {f(float(m.group(2)))!r}"

    return re.sub(rf"^({re.escape(prefix)}\S*) (\S+)$", sub, text, flags=re.M)


def replay(mutate: Callable[[int, str], str]) -> tuple[Advisor, Diagnosis]:
    clock = ReplayClock()
    adv = Advisor(Config(), RULES, clock=clock)
    d = None
    for i, (t, text) in enumerate(PAGES):
        clock.t = t
        assert adv.on_page(mutate(i, text), t)
        d = adv.diagnose(t)
    assert d is not None
    return adv, d


CLEAN_ADV, CLEAN = replay(lambda i, text: text)


def kinds(adv: Advisor) -> list[str]:
    return [w.kind for w in adv.window.bad_samples()]


def test_the_clean_replay_ends_in_advice_without_bad_samples() -> None:
    assert CLEAN.status == "advice" and CLEAN_ADV.window.restart_times() == []
    assert kinds(CLEAN_ADV) == [] and CLEAN_ADV.stats.scrapes == {"success": len(PAGES)}


CASES: dict[str, tuple[Callable[[int, str], str], str]] = {
    # request counters x1000 on one page (a proxy's garbage, a bit flip), then back
    "spike": (
        lambda i, t: scaled(t, "vllm:request_success_total", lambda v: v * 1000 + 1e6) if i == AT else t,
        "spike",
    ),
    # generation tokens lower on one page (an older cached answer), then back
    "went-down": (
        lambda i, t: scaled(t, "vllm:generation_tokens_total", lambda v: v / 2) if i == AT else t,
        "went_down",
    ),
    # one histogram's counts x1000 on one page, then back
    "histogram-spike": (
        lambda i, t: scaled(t, "vllm:time_to_first_token_seconds_", lambda v: v * 1000) if i == AT else t,
        "spike",
    ),
    # the request counter printed twice with two values
    "duplicate": (
        lambda i, t: (
            t.replace("vllm:request_success_total{", "vllm:request_success_total{", 1)
            + "".join(
                ln.rpartition(" ")[0] + " 1.0\n"
                for ln in t.splitlines()
                if ln.startswith("vllm:request_success_total{")
            )
            if i == AT
            else t
        ),
        "duplicate",
    ),
    # a negative counter
    "negative": (
        lambda i, t: scaled(t, "vllm:prompt_tokens_total", lambda v: -v) if i == AT else t,
        "negative",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_contradictory_reading_is_a_bad_sample_not_a_restart(case: str) -> None:
    mutate, kind = CASES[case]
    adv, d = replay(mutate)
    assert adv.window.restart_times() == [], "taken for a restart"
    assert "warming up" not in d.reason
    assert d.status == CLEAN.status and d.recommendation is not None
    assert kind in kinds(adv), kinds(adv)
    assert adv.stats.scrapes.get("bad_sample", 0) >= 1
    # what the rules read is what the clean replay read: the bad reading is not traffic
    for sig in ("requests_per_second", "generation_tokens_per_second", "ttft_seconds_p95"):
        assert d.signals[sig] == pytest.approx(CLEAN.signals[sig], rel=0.02), sig


def test_a_real_restart_is_still_a_restart() -> None:
    """A new process start time, counters from zero: warming up, as before."""
    start = float(re.search(r"^process_start_time_seconds (\S+)$", PAGES[0][1], re.M).group(1))  # type: ignore[union-attr]

    def restart(i: int, t: str) -> str:
        if i < AT:
            return t
        t = scaled(t, "process_start_time_seconds", lambda v: start + 60)
        for fam in ("vllm:request_success_total", "vllm:generation_tokens_total", "vllm:prompt_tokens_total"):
            t = scaled(t, fam, lambda v: max(0.0, v - 1e6) if v > 1e6 else v / 100)
        return t

    adv, d = replay(restart)
    assert adv.window.restart_times() and "warming up" in d.reason


def _counter_page(t: float, success: float, tokens: float, start: float | None) -> Snapshot:
    fams = {
        names.REQUEST_SUCCESS: Family(names.REQUEST_SUCCESS, "counter", "", {(): success}),
        names.GENERATION_TOKENS: Family(names.GENERATION_TOKENS, "counter", "", {(): tokens}),
    }
    if start is not None:
        fams[window_mod.START_TIME] = Family(window_mod.START_TIME, "gauge", "", {(): start})
    return Snapshot(t=t, families=fams)


def test_without_a_start_time_a_restart_is_every_request_counter_going_down() -> None:
    """Ray's exporter shows no process start time: every request counter going down is a
    restart; one going down while another rises is a bad sample."""
    w = Window(clock=lambda: 100.0)
    for t, succ, tok in [(0, 10, 100), (10, 20, 200), (20, 5, 300), (30, 25, 400)]:
        w.add_snapshot(_counter_page(t, succ, tok, None))
    assert w.restart_times() == [] and [b.kind for b in w.bad_samples()] == ["went_down"]
    assert w.counter_delta(names.REQUEST_SUCCESS) == 15  # 10 -> 20 (held at 20 on the bad page) -> 25
    w = Window(clock=lambda: 100.0)
    for t, succ, tok in [(0, 10, 100), (10, 20, 200), (20, 2, 20), (30, 5, 50)]:
        w.add_snapshot(_counter_page(t, succ, tok, None))
    assert w.restart_times() == [20] and w.bad_samples() == []


def test_a_series_lower_on_two_pages_in_a_row_restarted() -> None:
    """A lower reading is held once; lower again, the series itself restarted (from zero)."""
    w = Window(clock=lambda: 100.0)
    seq = [(0, 100), (10, 200), (20, 5), (30, 9), (40, 12)]
    for t, succ in seq:
        w.add_snapshot(_counter_page(t, succ, 1000 + t, 1.0))
    assert w.restart_times() == []
    assert w.counter_delta(names.REQUEST_SUCCESS) == 100 + 9 + 3


# ------------------------------------------------------------------ class 3: labels that change
def test_labels_that_change_on_every_page_keep_memory_bounded() -> None:
    """1,200 pages, each with 40 new gauge series and 40 new histogram series (a label that
    changes every page): the window's cells stay under its budget, what it remembers per
    series is bounded by the series of the window, and the churn is a bad sample."""
    w = Window(max_snapshots=1000, clock=lambda: 0.0)
    base = {
        names.GENERATION_TOKENS: Family(names.GENERATION_TOKENS, "counter", "", {(): 0.0}),
    }
    for i in range(1200):
        w.clock = lambda i=i: float(i)  # type: ignore[method-assign]
        gauges = {label_key({"engine": "0", "pod": f"p{i}-{j}"}): 1.0 for j in range(40)}
        hists = {
            label_key({"engine": "0", "pod": f"p{i}-{j}"}): Histogram(((1.0, i), (float("inf"), i)), i, i)
            for j in range(40)
        }
        fams = {
            **base,
            names.NUM_RUNNING: Family(names.NUM_RUNNING, "gauge", "", gauges),
            names.TTFT: Family(names.TTFT, "histogram", "", hists),
        }
        w.add_snapshot(Snapshot(t=float(i), families=fams))
    assert w._cells <= window_mod.MAX_CELLS
    assert len(w._hlast[names.TTFT]) <= 2 * 40 + 64
    # the last readings remembered: no more than the window's series (and the cap)
    in_window = sum(f.layout.size for f in w._frames)
    assert sum(len(v) for v in w._last.values()) <= min(in_window, window_mod.MAX_REMEMBERED) + 64
    assert "label_churn" in [b.kind for b in w.bad_samples()]
