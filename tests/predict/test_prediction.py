"""`vllm-advisor predict` and docs/prediction.md on the committed H200 recordings
(validation/runs/: real vLLM 0.25 on an H200, replayed; no GPU here)."""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.core.config import DEFAULT_TARGETS, Config
from advisor.core.model import EngineInfo
from advisor.derive.signals import CATALOG, Context, Signal, Values
from advisor.derive.window import Window
from advisor.diagnose.ruleset import load_rules
from advisor.drive import inputs, scaling
from advisor.drive import predict as predict_cmd
from advisor.outputs import prediction as prediction_out
from advisor.predict import perfmodel as pm
from advisor.predict import scoring, simulated
from advisor.verify.ledger import ExperimentRecord, Ledger
from tests.paths import REPO, validation_module

RUNS = REPO / "validation" / "runs"
R2_AFTER = str(RUNS / "kv-seqs-bind-r2.after")


def _load(name: str) -> Any:
    """A module of validation/ (``tests.paths.validation_module``): the fitted models its
    scripts cache are shared within the process."""
    return validation_module(name)


# the tests that fit every committed pair's base run share one worker, and with it the fits
# (validation/predictions.py's fitted, evaluate): ~45 s of CPU in four processes became ~25 s
FITS = pytest.mark.xdist_group("validation-fits")


@pytest.fixture(scope="module")
def predictions() -> Any:
    return _load("predictions")


def test_predict_json_has_exactly_the_documented_shape() -> None:
    res = CliRunner().invoke(
        main, ["predict", "--session", R2_AFTER, "--set", "max_num_seqs=72", "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    keys = {
        "output_tokens_per_second",
        "ttft_seconds_p50",
        "ttft_seconds_p95",
        "tpot_seconds_p95",
        "itl_seconds_p95",
        "preemptions_per_second",
        "running",
    }
    assert set(d) == {
        "knob",
        "current",
        "value",
        "binding_after",
        "predicted",
        "measured",
        "confidence",
        "simulated",
        "predicted_by",
        "closed_form",
        "notes",
    }
    # the advice decides a cap raise here by simulation, so the numbers said are the simulator's;
    # the closed form's own stand beside them
    assert d["predicted_by"] == "simulator"
    assert set(d["predicted"]) == keys and set(d["measured"]) == keys
    cf = d["closed_form"]
    assert set(cf) == {"predicted", "binding_after", "confidence"} and set(cf["predicted"]) == keys
    assert (cf["binding_after"], cf["confidence"]) == (d["binding_after"], d["confidence"])
    assert cf["predicted"] != d["predicted"]
    # the scheduler simulator beside it: the run's load was `vllm bench serve --max-concurrency
    # 256` (a closed loop), inferred from the pages alone; per-target goodput before and after
    sim = d["simulated"]
    assert (sim["arrivals"]["kind"], sim["arrivals"]["clients"]) == ("closed", 256)
    # vLLM 0.25 on the H200 said "Asynchronous scheduling is enabled.": the simulation does too
    assert sim["scheduling"] == "asynchronous"
    # caps 48 and 72 are capture sizes: no batch under either outgrows its full CUDA graph
    assert sim["cuda_graphs"] is None
    for side in ("before", "after"):
        assert set(sim[side]["share_meeting"]) == {"ttft_p95_seconds", "itl_p95_seconds", "all"}
        assert set(sim[side]["ttft_seconds"]) == {"p50", "p95", "p99"}
    # measured at 72 (the committed after-run): +9% throughput, TTFT p50 -19%
    assert sim["after"]["output_tokens_per_second"] > sim["before"]["output_tokens_per_second"]
    assert sim["after"]["ttft_seconds"]["p50"] < sim["before"]["ttft_seconds"]["p50"]
    assert (d["knob"], d["current"], d["value"]) == ("max_num_seqs", 48, 72)
    # the cap binds now; 72 fits in the 12 GiB cache at the sizes seen (~76 requests)
    assert d["binding_after"] == "max_num_seqs"
    for pred in (d["predicted"], cf["predicted"]):  # the simulator's, then the closed form's
        assert pred["running"] > d["measured"]["running"] * 1.3
        assert pred["output_tokens_per_second"] > d["measured"]["output_tokens_per_second"]
        assert pred["tpot_seconds_p95"] > d["measured"]["tpot_seconds_p95"]
        assert pred["ttft_seconds_p95"] < d["measured"]["ttft_seconds_p95"]
    # the simulator's prediction is its simulated change applied to the measured values
    for k, get in (
        ("output_tokens_per_second", lambda o: o["output_tokens_per_second"]),
        ("running", lambda o: o["running"]),
    ):
        r = get(sim["after"]) / get(sim["before"])
        assert d["predicted"][k] == pytest.approx(d["measured"][k] * r)
    # measured none now, simulated some after (the after-run at 72 preempted 60 times): a rate
    assert d["measured"]["preemptions_per_second"] == 0 and d["predicted"]["preemptions_per_second"] > 0
    assert 0 < d["confidence"] <= 1


def test_predict_text_and_flag_spellings() -> None:
    res = CliRunner().invoke(
        main, ["predict", "--session", R2_AFTER, "--set", "--kv-cache-memory-bytes=19327352832"]
    )
    assert res.exit_code == 0, res.output
    assert "kv_cache_memory_bytes: 12884901888 -> 19327352832" in res.output
    # the simulator decides a KV raise here: its table, then the closed form's line with the
    # binding limit and the confidence, each said to be the closed form's reading
    assert "predicted by the scheduler simulator" in res.output
    assert "it reads the binding limit now: the max_num_seqs cap" in res.output
    assert "its confidence 0.85 (its typical error" in res.output
    # a budget cut is the closed form's to decide: its table, its binding and confidence on top
    cut = CliRunner().invoke(main, ["predict", "--session", R2_AFTER, "--set", "max_num_batched_tokens=4096"])
    assert cut.exit_code == 0, cut.output
    assert "predicted by the scheduler simulator" not in cut.output
    assert "binding now: " in cut.output and "confidence: " in cut.output
    assert "not deciding: the simulator's TTFT p95 for a token-budget cut" in cut.output


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["--set", "max_num_seqs=72"], 2, "give exactly one of"),
        (["--session", R2_AFTER, "--set", "max_model_len=4096"], 2, "the model moves"),
        (["--session", R2_AFTER, "--set", "max_num_seqs"], 2, "KNOB=VALUE"),
        (["--session", R2_AFTER, "--set", "max_num_seqs=lots"], 2, "not a value"),
        # KV size fixed in bytes: gpu_memory_utilization does not size it
        (["--session", R2_AFTER, "--set", "gpu_memory_utilization=0.5"], 4, "kv_cache_memory_bytes is set"),
        (["--session", "/nonexistent/session", "--set", "max_num_seqs=72"], 1, "nonexistent"),
    ],
)
def test_predict_exit_codes(args: list[str], code: int, text: str) -> None:
    res = CliRunner().invoke(main, ["predict", *args])
    assert res.exit_code == code, res.output
    assert text in res.output


def test_an_idle_recording_is_insufficient_data(tmp_path: Path) -> None:
    """Two pages of a server that ran nothing: exit 4, saying why."""
    page = (REPO / "tests" / "fixtures" / "pages").glob("*.prom")
    first = next(iter(sorted(page)))
    a, b = tmp_path / "a.prom", tmp_path / "b.prom"
    a.write_text(first.read_text())
    b.write_text(first.read_text())
    res = CliRunner().invoke(
        main, ["predict", "--metrics-file", str(a), "--metrics-file", str(b), "--set", "max_num_seqs=8"]
    )
    assert res.exit_code == 4, res.output
    assert "insufficient data" in res.output


def _open_loop(run: str) -> bool:
    """The benchmark sent open arrivals (`--request-rate R`), not a closed loop of clients."""
    with gzip.open(RUNS / run / "bench.json.gz", "rt") as f:
        return str(json.load(f).get("request_rate")) != "inf"


@FITS
def test_prediction_meets_the_goal_on_the_h200_pairs(predictions: Any) -> None:
    """Throughput and TPOT p95 within 20% on at least 80% of the committed closed-loop H200 pairs
    (issue 22's goal is 90%: docs/prediction.md says where it stands and explains every miss),
    TTFT p95 within 35% on at least 70%. The open-loop pairs are the closed form's known miss of
    kind (next test). (TTFT p95 was held to 75% until two held-out pairs came, 2026-12-07:
    kv-capacity-r2's 50 GiB, whose TTFT p95 the closed form puts at 0.5 s for 6.2 s measured,
    where the simulator, which decides there, is within 17%; and prefix-shared, whose measured p95
    is the benchmark's cold start of a shared prefix: 15 of 21 pairs.)"""
    rows = [r for r in predictions.evaluate() if r["h200"] and not _open_loop(r["after"])]
    assert len(rows) >= 12
    assert sum(r["ok"] for r in rows) >= 0.8 * len(rows)
    assert sum(r["ttft_ok"] for r in rows) >= 0.70 * len(rows)


@FITS
def test_open_arrivals_the_closed_form_misses_the_simulator_holds(predictions: Any) -> None:
    """Issue 30's "one kind of traffic": under open arrivals (recorded on the H200) a raised cap
    past the knee gains only up to the arrival rate. The closed form (a closed loop of the
    clients it saw) predicts far more; the scheduler simulator, on the load it infers from the
    same pages, predicts throughput within 15% on every open-loop pair whose after-run stepped as
    its base run did (Steps within 15%: no model fitted to the base alone predicts a server that
    changed its speed)."""
    pairs = [(b, a, k, v) for b, a, k, v in predictions.pairs() if _open_loop(a)]
    assert len(pairs) >= 5
    cf_miss, no_fit, sim_misses = 0, [], []
    for base, after, knob, value in pairs:
        with gzip.open(RUNS / base / "bench.json.gz", "rt") as f:
            b0 = json.load(f)["output_throughput"]
        with gzip.open(RUNS / after / "bench.json.gz", "rt") as f:
            b1 = json.load(f)["output_throughput"]
        measured = b1 / b0
        cf = predictions.predicted(base, knob, value).ratio("output_tokens_per_second")
        cf_miss += abs(cf / measured - 1) > 0.15
        model, _, rows = predictions.fitted(base)
        if model.fit is None:  # no step time to simulate with: a server that was never busy
            no_fit.append(base)
            continue
        sim = simulated.simulate_change(model, knob, value, rows, dict(DEFAULT_TARGETS))
        assert sim.arrivals.kind == "open", (base, sim.arrivals.why)
        ratio = sim.after.output_tokens_per_second / sim.before.output_tokens_per_second
        if abs(ratio / measured - 1) > 0.15 and abs(_steps(predictions, base, after) - 1) <= pm.SAME_SPEED:
            sim_misses.append(after)
    assert cf_miss >= 3  # open-cap-past (+63% and +50% predicted, +16% measured), open-bursty
    # the CPU runs below the knee (cpu-open-below*): too little busy time for a step-time fit
    assert all(b.startswith("cpu-open-below") or b.startswith("cpu-open-bursty-below") for b in no_fit), (
        no_fit
    )
    # every fitted pair whose after-run stepped as its base did within 15% (follow-misconf-r3's
    # cap 18, +19%, stepped 16% slower than its base's fit: more requests waited at the cap, the
    # slowdown docs/prediction.md describes). follow-misconf-r2.after was a miss (-28% against +79%) until
    # its load was read as the Poisson arrivals it was sent (gamma shape 0.19 -> 0.90: the drain
    # after the last arrival is not burstiness) and the lengths' spread was fitted to the token
    # histograms' buckets (docs/prediction.md)
    assert sim_misses == [], sim_misses


def test_the_recorded_ill_conditioned_run_prices_prefill_as_its_well_conditioned_twin() -> None:
    """follow-misconf-r2.before (H200): cap 12 under a queue, one 1,024-token prompt admitted
    about every 43 steps, so every interval carried ~24 prefill tokens per step and least squares
    gave 59 us per prefill token (R^2 0.08): a chunk step at 68 ms, where the run's ITL histogram
    has 1.1% of its samples over 25 ms against the chunk steps' 2.3%. The same engine and model
    fitted 17-23 us wherever its intervals varied (follow-misconf.before, kv-seqs-bind*,
    open-cap-past, R^2 0.3-0.99)."""
    model, _ = predict_cmd.from_source(
        Config(), load_rules(), session_dir=str(RUNS / "follow-misconf-r2.before")
    )
    assert model.fit is not None and model.fit.r2 is not None and model.fit.r2 < pm.LOW_R2
    assert "ITL histogram" in model.fit.basis
    assert 10e-6 < model.fit.c < 25e-6, model.fit
    twin, _ = predict_cmd.from_source(Config(), load_rules(), session_dir=str(RUNS / "kv-seqs-bind.before"))
    # R^2 0.98: its prefill cost left as fitted (its KV read priced by the bytes, as on every GPU)
    assert twin.fit is not None and twin.fit.basis.startswith("least squares") and "ITL" not in twin.fit.basis


@FITS
def test_docs_prediction_is_current(predictions: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert predictions.main(["--check"]) == 0, capsys.readouterr().err


@FITS
@pytest.mark.slow  # the simulator on every committed pair, both knob values: ~20 s
def test_docs_simulator_table_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30's table: the simulator beside the closed form on every committed pair."""
    assert _load("simulation").main(["--check"]) == 0, capsys.readouterr().err


@FITS
@pytest.mark.slow  # the simulator on every committed pair, six times: ~70 s
def test_docs_draws_table_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    """How much of the simulator's miss is the draw: on the benchmark's own requests, and one
    draw of its own against another."""
    assert _load("simulation").main(["--draws", "--check"]) == 0, capsys.readouterr().err


def test_a_draws_scenario_lists_its_base_then_the_same_draw_again_then_the_other_seeds() -> None:
    """The per-run table of the draws block reads a configuration's runs in this order: the
    server's repeat of one draw sits beside its first run."""
    report = _load("report")
    assert report.draw_runs(json.loads(report.RESULTS.read_text())["runs"], "knee-draws") == [
        ("knee-draws.before", 0),
        ("knee-draws.seed-0-again", 0),
        ("knee-draws.seed-1", 1),
        ("knee-draws.seed-2", 2),
        ("knee-draws.seed-3", 3),
    ]


def test_the_draw_ceiling_counts_how_often_one_draw_is_within_the_goal_of_another() -> None:
    sim = _load("simulation")

    def pair(ttft_p95: float) -> Any:
        p = sim.Pair("b", "a", "max_num_seqs", 2.0, throughput_after=100.0)
        p.cells = {
            "TTFT p95": (1.0, {"simulator": ttft_p95}),
            "goodput": (50.0, {"simulator": 50.0}),
        }
        return p

    # pair 0: the draws agree; pair 1: one draw of three is twice the others
    draws = [[pair(1.0), pair(1.0)], [pair(1.1), pair(1.0)], [pair(0.95), pair(2.0)]]
    got = sim.draw_ceiling(draws)
    assert got["goodput"] == (2.0, 2)
    # pair 1: of the 6 ordered pairs of draws, the 2 between the draws of 1.0 are within 30%
    assert got["TTFT p95"][1] == 2
    assert got["TTFT p95"][0] == pytest.approx(1.0 + 2 / 6)
    # a metric no draw predicts is not counted
    assert got["TPOT p95"] == (0.0, 0)


def _steps(predictions: Any, fitted: str, stepped: str) -> float:
    """The Steps column: ``stepped``'s intervals priced by ``fitted``'s step fit, relative to
    ``fitted``'s own (1: it stepped as the fit says)."""
    m0, _, rows0 = predictions.fitted(fitted)
    m1, _, rows1 = predictions.fitted(stepped)
    assert m0.fit is not None
    own = m0.fit.speed_of(rows0, m0.config.kv_cache_tokens, m0.config.full_limit())
    other = m0.fit.speed_of(rows1, m1.config.kv_cache_tokens, m1.config.full_limit())
    assert own and other
    return float(other / own)


@FITS
def test_runs_of_one_configuration_step_alike_and_after_runs_past_a_full_graph_too(predictions: Any) -> None:
    """The Steps column of the simulator's table (docs/prediction.md): one run's step fit applied
    to another run's intervals. The four runs of kv-seqs-bind's configuration on three leases
    step within 5% of each other's fits. Two after-runs stepped off their base's fit by 22% and
    34% until a decode step past the largest full CUDA graph was priced as run piecewise
    (advisor/predict/graphs.py): kv-seqs-bind.after (cap 48 -> 36: its decode batches of 33-36
    lost their full graph; ITL p50 6.9 -> 8.7 ms at a smaller batch) and follow-misconf-r2.after
    (cap 12, where 9-12 decode piecewise, -> 24, where every decode batch has its graph); both
    now step within 5% of what the base's fit says. follow-misconf-r2's base still ran ~1.5x
    slower than follow-misconf.before on the same configuration and load: both piecewise
    throughout, on two leases (the host's speed; docs/validation.md, item 6)."""

    def steps(fitted: str, stepped: str) -> float:
        return _steps(predictions, fitted, stepped)

    same = ["kv-seqs-bind.before", "kv-seqs-bind-r2.before", "kv-seqs-bind-aa.1", "kv-seqs-bind-aa.2"]
    spread = {(a, b): steps(a, b) for a in same for b in same if a != b}
    assert all(abs(x - 1) < 0.05 for x in spread.values()), spread
    assert abs(steps("kv-seqs-bind.before", "kv-seqs-bind.after") - 1) < 0.05
    assert abs(steps("follow-misconf-r2.before", "follow-misconf-r2.after") - 1) < 0.05
    assert steps("follow-misconf.before", "follow-misconf-r2.before") > 1.4
    # without the piecewise price, the two after-runs are as far off as they were
    for base, after, off in (("kv-seqs-bind.before", "kv-seqs-bind.after", 1.15),
                             ("follow-misconf-r2.before", "follow-misconf-r2.after", -0.85)):  # fmt: skip
        m0, _, rows0 = predictions.fitted(base)
        m1, _, rows1 = predictions.fitted(after)
        flat = replace(m0.fit, piecewise_s=0.0)
        ratio = flat.speed_of(rows1, m1.config.kv_cache_tokens) / flat.speed_of(
            rows0, m0.config.kv_cache_tokens
        )
        assert ratio > off if off > 0 else ratio < -off, (after, ratio)


@FITS
def test_the_kv_read_on_a_gpu_is_priced_at_the_weights_bandwidth(predictions: Any) -> None:
    """On a GPU a decode step reads the weights and the KV cache at one bandwidth: the fitted mean
    decode step is split between the weights and the KV read as their bytes are (13.49 GiB of
    weights, 128 KiB a token), 39-44 ns a token on every H200 base run, within a factor 2 of what
    the H200's 4.8 TB/s reads 128 KiB in (27 ns; the fixed part's other costs make it an upper
    bound). Least squares over the runs' intervals, whose batch the cap or the cache pinned, gave
    anything from below zero (queue-headroom.before, dropped) to 24-31 ns (kv-seqs-bind.before,
    kv-seqs-bind-r2.after) and 131 ns (follow-misconf.before) for the same model on the same
    device. Priced by the bytes, each after-run at another batch steps as its base run's fit says
    within 5% (Steps 1.07, 1.05, 1.05 and 0.92 with the least-squares slopes; kv-seqs-bind.after,
    whose server slowed at a smaller batch, was the known exception until its decode batches past
    the largest full CUDA graph were priced as run piecewise). follow-misconf.before -> .after
    crosses that line the other way (cap 12, decoding 9-12 piecewise, -> 26) on the lease whose
    piecewise steps cost least (its one full-graph interval read no penalty; the typical +35%
    it is weighed with makes it +18%): Steps 1.16, within 20%."""
    physics = 131072 / 4.8e12  # seconds to read one KV token's bytes at the H200's bandwidth
    ks = []
    for base, after, within in (
        ("queue-headroom.before", "queue-headroom.after", 0.05),
        ("kv-capacity.before", "kv-capacity.after", 0.05),
        ("kv-seqs-bind-r2.after", "kv-seqs-bind-r2.kv-cache-memory-bytes-12884901888_max-num-seqs-72", 0.05),
        ("follow-misconf.before", "follow-misconf.after", 0.2),
    ):
        f = predictions.fitted(base)[0].fit
        assert f is not None and "weights' bandwidth" in f.basis and f.feature == "kv", (base, f)
        assert physics / 2 <= f.k <= 2 * physics, (base, f.k)
        ks.append(f.k)
        steps = _steps(predictions, base, after)
        assert abs(steps - 1) <= within, (base, steps)
    assert max(ks) / min(ks) < 1.15, ks  # one model on one device: one price


def _observed(run: str) -> tuple[scoring.Observed, EngineInfo]:
    adv, _ = inputs.from_session(RUNS / run, Config(), load_rules(), simulate=False)
    return scoring.Observed.of(adv.intake, adv.window, None), adv.engine


def test_a_judged_change_says_when_the_server_stepped_at_another_speed() -> None:
    """An experiment's prediction keeps the step time fitted before the change; once judged, the
    after-window's steps are priced by it. follow-misconf.before and follow-misconf-r2.before
    (one configuration and load, a day apart, no preemption) read as a before and an after:
    1.5x slower, said in the history line; a window against itself: 1.0, nothing said. A
    window that preempted reads nothing (recomputed prompts are work the counters hide)."""
    targets = dict(DEFAULT_TARGETS)
    before, eng = _observed("follow-misconf.before")
    pred = scoring.predict_change(before, eng, targets, "max_num_seqs", 24)
    assert pred is not None and pred["step_fit"]["preempted"] is False
    # least squares: its own steps, up to how the piecewise price is spread over its intervals
    assert pred["step_fit"]["speed"] == pytest.approx(1.0, abs=1e-3)
    slow, slow_eng = _observed("follow-misconf-r2.before")
    judged = scoring.prediction_error(pred, slow, slow_eng, targets)
    assert 1.4 < judged["steps"] < 1.7
    line = prediction_out.prediction_line(judged)
    assert f"took {judged['steps'] - 1:.0%} longer than the step time fitted before" in line
    same = scoring.prediction_error(pred, before, eng, targets)
    assert same["steps"] == pytest.approx(1.0, abs=1e-6)
    assert scoring.speed_note(same["steps"]) is None
    assert "steps took" not in prediction_out.prediction_line(same)
    preempting, p_eng = _observed("follow-misconf.after")  # 13 preemptions
    assert scoring.prediction_error(pred, preempting, p_eng, targets)["steps"] is None


def test_the_prediction_a_change_is_held_to_is_the_deciding_models() -> None:
    """When the daemon sees a knob change it keeps the prediction the after-window is judged
    against (``history``, the ledger): the simulator's numbers where the advice would decide such
    a change by simulation, the closed form's beside them; the closed form's for a token-budget
    cut, which it decides. follow-misconf.before (cap 12, 4.5 req/s of open arrivals): a faster
    server gets no more requests, so the cap raise's throughput can rise to the arrival rate
    (~2,300 tok/s: the after-run at cap 24 on another day measured 2,238), not past it as the
    closed form, taking the load for a closed loop, says (+102%)."""
    targets = dict(DEFAULT_TARGETS)
    before, eng = _observed("follow-misconf.before")
    raised = scoring.predict_change(before, eng, targets, "max_num_seqs", 24)
    assert raised is not None and raised["predicted_by"] == "simulator"
    assert set(raised["closed_form"]) == {"predicted", "binding_after", "confidence"}
    thr0 = raised["measured"]["output_tokens_per_second"]
    assert raised["predicted"]["output_tokens_per_second"] < 1.25 * thr0
    assert raised["closed_form"]["predicted"]["output_tokens_per_second"] > 1.8 * thr0
    assert raised["step_fit"]["speed"] == pytest.approx(1.0, abs=1e-3)  # the closed form's fit, kept
    cut = scoring.predict_change(before, eng, targets, "max_num_batched_tokens", 512)
    assert cut is not None and cut["predicted_by"] == "closed form" and "closed_form" not in cut


def test_simulator_table_counts_a_goodput_of_none_on_both_sides_as_a_hit() -> None:
    sim = _load("simulation")
    pair = sim.Pair("a.before", "a.after", "max_num_seqs", 8, throughput_after=1000.0)
    pair.cells = {
        "goodput": (10.0, {"closed form": 300.0, "simulator": 40.0}),  # 10 < 5% of 1000: none
        "tok/s": (1000.0, {"closed form": 1160.0, "simulator": 860.0}),
    }
    assert pair.hit("goodput", "simulator") is True and pair.hit("goodput", "closed form") is False
    assert pair.hit("tok/s", "simulator") is True and pair.hit("tok/s", "closed form") is False
    assert pair.hit("TTFT p95", "simulator") is None
    assert (
        sim._err(pair, "goodput", "simulator") == "**none**"
        and sim._err(pair, "tok/s", "closed form") == "+16%"
    )
    assert sim.shares([pair])["simulator"]["goodput"] == (1, 1)


def test_history_shows_predicted_against_measured(tmp_path: Path) -> None:

    path = tmp_path / "ledger.db"
    pred = {
        "knob": "max_num_seqs",
        "predicted": {
            "output_tokens_per_second": 6000.0,
            "ttft_seconds_p95": 17.0,
            "tpot_seconds_p95": 0.012,
        },
        "measured_after": {
            "output_tokens_per_second": 5927.0,
            "ttft_seconds_p95": 18.1,
            "tpot_seconds_p95": 0.0124,
        },
        "error": {"output_tokens_per_second": 6000.0 / 5927.0 - 1, "ttft_seconds_p95": 17.0 / 18.1 - 1},
    }
    Ledger(path).add(
        ExperimentRecord(
            started_at=1_800_000_000.0, verdict="keep", source="daemon", knob="max_num_seqs", old_value=48,
            new_value=72, prediction=pred,
        )
    )  # fmt: skip
    res = CliRunner().invoke(main, ["history", "--ledger", str(path)])
    assert res.exit_code == 0, res.output
    assert "max_num_seqs 48 -> 72: KEEP" in res.output
    assert "output tokens/s 6,000 tok/s predicted / 5,927 tok/s measured (+1%)" in res.output
    assert "TTFT p95 17.00 s predicted / 18.10 s measured (-6%)" in res.output
    assert "by the scheduler simulator" not in res.output  # a ledger row that does not say
    res = CliRunner().invoke(main, ["history", "--ledger", str(path), "--format", "json"])
    assert json.loads(res.stdout)[0]["prediction"]["error"]["output_tokens_per_second"] > 0
    # a prediction that says which model made it: the line says so
    line = prediction_out.prediction_line({**pred, "predicted_by": "simulator"})
    assert line.startswith("by the scheduler simulator: output tokens/s 6,000 tok/s predicted")


RULE_NEEDING_MEMORY = """\
version: advisor/v1
id: queue-budget-on-a-large-gpu
summary: A budget under 16384 on a large GPU.
severity: info
priority: 40
category: token-budget
when:
  - {signal: max_num_batched_tokens, op: "<", value: 16384}
  - {signal: gpu_memory_bytes, op: ">=", value: 75161927680}
for: 20s
knob:
  name: max_num_batched_tokens
  direction: increase
  step: "x2"
explain:
  what: a queue on a large GPU
  why: a test rule
  expect: nothing
  verify: [requests_waiting_avg]
  rollback: restore
  evidence: [max_num_batched_tokens, gpu_memory_bytes]
  references:
    - https://docs.vllm.ai/en/latest/configuration/optimization.html
examples:
  fires:
    - {max_num_batched_tokens: 8192, gpu_memory_bytes: 150000000000}
  quiet:
    - {max_num_batched_tokens: 8192, gpu_memory_bytes: 1000000000}
"""


def test_a_rule_that_could_fire_but_lacks_an_input_is_inconclusive_never_healthy(tmp_path: Path) -> None:
    """Issue 13, miss 3: a session that recorded no GPU memory size (the H200 sessions did not,
    until their host facts were restored from the live diagnosis) can never fire a rule that
    checks it in replay; the answer names what is missing instead of "healthy"."""
    rules = tmp_path / "rules"
    rules.mkdir()
    for f in (REPO / "rules").glob("*.yaml"):
        (rules / f.name).write_text(f.read_text())
    session = tmp_path / "healthy.before"
    shutil.copytree(RUNS / "healthy.before", session)
    eng = json.loads((session / "engine.json").read_text())
    eng["facts"] = {k: v for k, v in eng["facts"].items() if not v["detail"].startswith("host probe")}
    eng["gpu_count"] = eng["gpu_memory_gib"] = None
    (session / "engine.json").write_text(json.dumps(eng))
    healthy = ["explain", "--session", str(session), "--format", "json", "--rules-dir", str(rules)]
    assert json.loads(CliRunner().invoke(main, healthy).stdout)["status"] == "healthy"
    (rules / "queue-budget-on-a-large-gpu.yaml").write_text(RULE_NEEDING_MEMORY)
    res = CliRunner().invoke(main, healthy)
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["status"] == "inconclusive", d["reason"]
    assert "queue-budget-on-a-large-gpu could not be checked (missing gpu_memory_bytes)" in d["reason"]


def _values_with(**base: float | None) -> Any:
    """The catalog's budget signals over constant inputs (the inputs' own functions are tested
    elsewhere)."""

    cat = dict(CATALOG)
    for name, value in base.items():
        cat[name] = Signal(name, "x", "", lambda c, v, value=value: value, None)
    return Values(Context(Window()), cat)


def test_a_queue_that_is_the_budgets_prefill_backlog_counts_as_prefill_time() -> None:
    """Issue 13, miss 3: 512-token budget, 3,000-token prompts, 150 outputs: the budget sustains
    512 / (1 + 20) = 24 running requests; 64 clients wait and run, the cap is 256. TTFT is 96%
    queue time and that queue is the budget's backlog."""
    v = _values_with(
        max_num_batched_tokens=512.0, prompt_tokens_mean=3000.0, generation_tokens_mean=150.0,
        requests_in_system_max=64.0, engines=1.0, max_num_seqs=256.0,
        prefill_share_of_ttft=0.03, queue_share_of_ttft=0.96,
    )  # fmt: skip
    assert v["budget_sustained_batch"] == pytest.approx(512 / 21)
    assert v["prefill_budget_binds"] == 1.0
    assert v["prefill_backlog_share_of_ttft"] == pytest.approx(0.99)
    assert v["queue_share_outside_budget"] == 0.0
    # the H200 itl-stutter case: budget 2048, ~6k prompts, 128 outputs, 24 clients: the budget
    # sustains ~42, so the queue is not its backlog (a bigger budget did not help there)
    h200 = _values_with(
        max_num_batched_tokens=2048.0, prompt_tokens_mean=6030.0, generation_tokens_mean=128.0,
        requests_in_system_max=24.0, engines=1.0, max_num_seqs=256.0,
        prefill_share_of_ttft=0.26, queue_share_of_ttft=0.8,
    )  # fmt: skip
    assert h200["prefill_budget_binds"] == 0.0
    assert h200["prefill_backlog_share_of_ttft"] == pytest.approx(0.26)
    assert h200["queue_share_outside_budget"] == pytest.approx(0.8)
    # unknown inputs stay unknown
    assert _values_with(prompt_tokens_mean=None)["prefill_budget_binds"] is None


def test_predict_says_where_decode_batches_outgrow_their_full_cuda_graph() -> None:
    """queue-probe.before (an H100, cap 18): decode batches of 17-18 run without a full CUDA graph
    (16 is the largest within the cap); under cap 36 only 33-36 would. The JSON says so, and the
    text's load line, with the piecewise time the fit found in the recording."""
    run = str(RUNS / "queue-probe.before")
    res = CliRunner().invoke(
        main, ["predict", "--session", run, "--set", "max_num_seqs=36", "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    graphs = json.loads(res.output)["simulated"]["cuda_graphs"]
    assert (graphs["full_decode_batch_now"], graphs["full_decode_batch_after"]) == (16, 32)
    assert 0.0005 < graphs["piecewise_step_seconds"] < 0.005
    text = CliRunner().invoke(main, ["predict", "--session", run, "--set", "max_num_seqs=36"])
    assert text.exit_code == 0, text.output
    flat = " ".join(text.output.split())
    assert (
        "decode batches past 16 run without a full CUDA graph" in flat and "past 32 after the change" in flat
    )
    # a cap on a capture size: nothing outgrows its graph, and nothing is said
    same = CliRunner().invoke(
        main, ["predict", "--session", run, "--set", "max_num_seqs=32", "--format", "json"]
    )
    assert json.loads(same.output)["simulated"]["cuda_graphs"]["full_decode_batch_after"] is None


@FITS
def test_the_step_fit_counts_the_recompute_the_counters_hide() -> None:
    """decode-kv.before (an H100, 2026-12-07: 486 preemptions, 256 in and 1,024 out): vLLM counts
    a prompt's tokens once, when its first token comes, so a preempted request's recompute is in
    the steps' time and not in their tokens. Fitted as counted, the simulator charged it twice and
    queued the run's own requests twice as long (TTFT p50 +112%, p95 +76%); fitted again with the
    recompute today's simulation shows counted as prefill (~415 tokens a preemption: its prompt
    and outputs so far less what the prefix cache kept), within 10%. A window that did not
    preempt is fitted once, as before."""
    sim = _load("simulation")
    model, reqs, arr, bench = sim.own_load("decode-kv.before")
    r = simulated.recompute_per_preemption(model)
    assert r is not None and 300 < r < 600, r
    assert any(row.preemptions > 0 for row in model.rows)
    _, now = simulated.outcome_today(model, reqs, arr, dict(DEFAULT_TARGETS))
    assert now.ttft[0] is not None and now.ttft[1] is not None
    assert now.ttft[0] * 1e3 == pytest.approx(bench["median_ttft_ms"], rel=0.10)
    assert now.ttft[1] * 1e3 == pytest.approx(bench["p95_ttft_ms"], rel=0.10)
    # the facts the fit reads: each preempted interval's prefill grows by its preemptions x r
    obs, _ = _observed("decode-kv.before")
    facts = obs.facts
    assert facts.with_recompute(0.0) is facts
    more = facts.with_recompute(r)
    added = sum(row.preemptions for row in facts.rows) * r
    assert more.busy["prefill_steps"] - facts.busy["prefill_steps"] == pytest.approx(added, rel=1e-9)
    assert more.busy["steps"] == facts.busy["steps"] and more.busy["dt"] == facts.busy["dt"]
    calm, _, _ = _load("predictions").fitted("follow-misconf-r4.after2")  # no preemption
    assert simulated.recompute_per_preemption(calm) is None


@FITS
def test_the_daemon_reads_the_recompute_off_its_scorer_and_simulates_it_once_per_knobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The recompute estimate is a run of today's knobs, which the daemon's scorer makes anyway:
    ``simulated.Recent`` simulates it itself only where no scorer of today's knobs has run (its
    first decision, the first after a knob change), then reads it off the scorer's run; a replay's
    decisions before its answer (``Recent.off``) simulate nothing and fit without it. The
    one-shot path (no ``recent``) simulates it each time; both fit the same model."""
    obs, eng = _observed("decode-kv.before")
    targets = dict(DEFAULT_TARGETS)
    values = Values(Context(obs.window, eng, obs.seconds, targets)).all()
    alone = pm.build(obs.facts, obs.window, eng, values, obs.seconds)
    assert simulated.hides_recompute(alone)
    calls: list[float | None] = []
    real = simulated.recompute_per_preemption

    def counted(model: pm.Model, *a: Any, **k: Any) -> float | None:
        calls.append(real(model, *a, **k))
        return calls[-1]

    monkeypatch.setattr(simulated, "recompute_per_preemption", counted)
    one_shot = scoring.model_of(obs, eng, values)
    assert len(calls) == 1 and calls[0] is not None and 300 < calls[0] < 600
    assert one_shot.fit != alone.fit  # fitted again with the recompute counted
    recent = simulated.Recent()
    first = scoring.model_of(obs, eng, values, recent)
    assert len(calls) == 2 and first.fit == one_shot.fit  # its first decision: simulated once
    again = scoring.model_of(obs, eng, values, recent)
    assert len(calls) == 2 and again.fit == one_shot.fit  # the same knobs: not again
    scorer = recent.scorer(first, targets, 0.0, "key")
    assert scorer.why_not() is None and scorer.ran_today
    from_scorer = scorer.recomputed
    assert from_scorer is not None and 300 < from_scorer < 600
    assert recent.recompute_per_preemption(first) == from_scorer and len(calls) == 2
    other = replace(first, config=replace(first.config, max_num_seqs=(first.config.max_num_seqs or 0) + 1))
    assert recent.recompute_per_preemption(other) is not None and len(calls) == 3  # knobs changed
    assert scoring.model_of(obs, eng, values, simulated.Recent.off("a replay")).fit == alone.fit
    assert len(calls) == 3
    # the daemon's replicas sizing fits the model beside the decision: it reads the same estimate
    adv, d = inputs.from_session(RUNS / "decode-kv.before", Config(), load_rules())
    assert d is not None and d.status == "advice" and len(calls) == 4  # its one simulated decision
    n = len(calls)
    assert scaling.Sizer()(adv, d, 1) is not None and len(calls) == n
