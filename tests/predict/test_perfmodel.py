"""The performance model (advisor/predict/perfmodel.py) on pages of a simulated engine.

A stand-in, said here: the pages come from an engine simulated with a known step-time law
(T = a + k x KV tokens read + c x prefill tokens), because only the fit's arithmetic is under test.
How the model predicts real servers is checked on the committed H200 recordings
(tests/predict/test_prediction.py, docs/prediction.md).
"""

from __future__ import annotations

import dataclasses

import pytest

from advisor.core import names as n
from advisor.core.model import EngineInfo, Family, Histogram, Provenanced, Snapshot, label_key
from advisor.derive.window import Window
from advisor.predict import perfmodel as pm
from advisor.predict.intake import TERMS, Row, Sums, row_between
from advisor.predict.scoring import Observed

A, K, C = 0.004, 3e-8, 2e-5  # seconds per step, per KV token read, per prefill token
KV_TOKENS = 65536.0
LABELS = label_key({"engine": "0", "model_name": "m"})


def _fam(name: str, typ: str, value: object) -> Family:
    return Family(name, typ, "", {LABELS: value})


def _page(t: float, c: dict[str, float], running: float, waiting: float, kv: float) -> Snapshot:
    fams = {
        n.NUM_RUNNING: _fam(n.NUM_RUNNING, "gauge", running),
        n.NUM_WAITING: _fam(n.NUM_WAITING, "gauge", waiting),
        n.KV_CACHE_USAGE: _fam(n.KV_CACHE_USAGE, "gauge", kv),
        n.GENERATION_TOKENS: _fam(n.GENERATION_TOKENS, "counter", c["gen"]),
        n.PROMPT_TOKENS: _fam(n.PROMPT_TOKENS, "counter", c["prompt"]),
        n.NUM_PREEMPTIONS: _fam(n.NUM_PREEMPTIONS, "counter", c["pre"]),
        n.REQUEST_SUCCESS: _fam(n.REQUEST_SUCCESS, "counter", c["done"]),
        n.ITERATION_TOKENS: _fam(
            n.ITERATION_TOKENS,
            "histogram",
            Histogram(((float("inf"), c["steps"]),), c["steps"], c["gen"] + c["prompt"]),
        ),
    }
    return Snapshot(t, fams)


def simulate(
    rows: list[tuple[float, float, float]],
    waiting: float = 50.0,
    dt: float = 2.0,
    pre_per_interval: float = 0.0,
) -> Window:
    """Pages every ``dt`` s of an engine running (batch, kv usage, prefill tokens per step)."""
    w = Window(max_age_s=1e9, clock=lambda: 1e6)
    c = {"gen": 0.0, "prompt": 0.0, "pre": 0.0, "done": 0.0, "steps": 0.0}
    t = 1000.0
    batch0, kv0, _ = rows[0]
    w.add_snapshot(_page(t, c, batch0, waiting, kv0))
    for batch, kv, prefill in rows:
        step = A + K * kv * KV_TOKENS + C * prefill
        steps = dt / step
        c["steps"] += steps
        c["gen"] += steps * batch
        c["prompt"] += steps * prefill
        c["pre"] += pre_per_interval
        c["done"] += steps * batch / 500.0
        t += dt
        w.add_snapshot(_page(t, c, batch, waiting, kv))
    return w


def build(w: Window, eng: EngineInfo, values: dict[str, float]) -> pm.Model:
    """The model of a window's pages, taken in page by page as the daemon does."""
    obs = Observed.of_window(w)
    return pm.build(obs.facts, obs.window, eng, values)


def engine(**knobs: object) -> EngineInfo:
    return EngineInfo({k: Provenanced(v, "cmdline") for k, v in knobs.items()})


VALUES = {
    "max_num_seqs": 48.0,
    "max_num_batched_tokens": 8192.0,
    "kv_cache_tokens": KV_TOKENS,
    "prompt_tokens_mean": 1000.0,
    "generation_tokens_mean": 500.0,
    "engines": 1.0,
}


def busy_rows() -> list[tuple[float, float, float]]:
    # a batch pinned at the cap, KV usage and prefill per step varying as requests come and go
    return [(48.0, 0.5 + 0.04 * (i % 5), 40.0 + 60.0 * (i % 4)) for i in range(30)]


def test_step_time_fit_recovers_the_law_the_engine_obeys() -> None:
    m = build(simulate(busy_rows()), engine(kv_cache_memory_bytes=2**33), VALUES)
    assert m.fit is not None and m.fit.feature == "kv"
    # within 5%: the pages show KV usage at the ends of an interval, the law used the interval's own
    assert m.fit.a == pytest.approx(A, rel=0.05)
    assert m.fit.k == pytest.approx(K, rel=0.05)
    assert m.fit.c == pytest.approx(C, rel=0.05)
    assert m.offered == pytest.approx(48 + 50)
    assert m.binding == "max_num_seqs"


def test_a_run_steps_as_its_own_fit_gives_and_a_slower_one_is_named_by_how_much() -> None:
    """``speed_of``: a least-squares fit gives its own intervals' total time back (1.0); the same
    work taking 30% longer (a server that slowed) reads 1.3; intervals without steps, nothing."""
    m = build(simulate(busy_rows()), engine(kv_cache_memory_bytes=2**33), VALUES)
    assert m.fit is not None and m.rows
    kv = m.config.kv_cache_tokens
    assert m.fit.speed_of(m.rows, kv) == pytest.approx(1.0, abs=1e-9)
    slower = [dataclasses.replace(r, dt=1.3 * r.dt) for r in m.rows]
    assert m.fit.speed_of(slower, kv) == pytest.approx(1.3, abs=1e-9)
    assert m.fit.speed_of([dataclasses.replace(r, steps=0.0) for r in m.rows], kv) is None


def test_an_unchanged_knob_predicts_what_was_measured() -> None:
    m = build(simulate(busy_rows()), engine(kv_cache_memory_bytes=2**33), VALUES)
    p = pm.predict(m, "max_num_seqs", 48)
    for k in pm.METRICS:
        assert p.predicted[k] == pytest.approx(p.measured[k]), k
    assert set(p.to_json()) == {
        "knob",
        "current",
        "value",
        "binding_after",
        "predicted",
        "measured",
        "confidence",
    }
    assert list(p.to_json()["predicted"]) == list(pm.METRICS)


def test_a_higher_cap_grows_the_batch_until_the_kv_cache_binds() -> None:
    m = build(simulate(busy_rows()), engine(kv_cache_memory_bytes=2**33), VALUES)
    holds = KV_TOKENS / (m.kv_per_running or 1)  # ~2300 KV tokens per running request -> ~28
    small = pm.predict(m, "max_num_seqs", 60)
    assert small.binding_after in ("kv_cache", "max_num_seqs")
    big = pm.predict(m, "max_num_seqs", 500)
    assert big.binding_after == "load" or big.binding_after == "kv_cache"
    r = big.predicted["running"]
    assert r is not None and r <= max(holds, 98.0) + 1e-6
    # a larger batch: more tokens per second, longer steps, preemptions once it outgrows the cache
    thr = big.ratio("output_tokens_per_second")
    assert thr is not None
    assert (big.predicted["preemptions_per_second"] or 0) >= (small.predicted["preemptions_per_second"] or 0)


def test_more_kv_removes_preemptions_when_the_cap_fits_in_it() -> None:
    m = build(
        simulate([(48.0, 0.95 + 0.01 * (i % 3), 50.0 + 40 * (i % 4)) for i in range(30)], pre_per_interval=1),
        engine(kv_cache_memory_bytes=2**33),
        {**VALUES, "prompt_tokens_mean": 1200.0},
    )
    assert m.measured["preemptions_per_second"] == pytest.approx(0.5)
    p = pm.predict(m, "kv_cache_memory_bytes", 2 * 2**33)
    assert p.predicted["preemptions_per_second"] == 0.0
    assert p.binding_after == "max_num_seqs"


def test_a_cache_that_fits_the_batch_only_in_tokens_still_preempts_in_blocks() -> None:
    # 6 requests of 384 + 384 tokens against 4,608 tokens: they fit as tokens, but in blocks of
    # 128 each holds 6 blocks, and V1 keeps one of the 36 as its null block, so one does not fit
    values = {
        **VALUES,
        "max_num_seqs": 6.0,
        "kv_cache_tokens": 4608.0,
        "prompt_tokens_mean": 384.0,
        "generation_tokens_mean": 384.0,
    }
    rows = [(6.0, 0.9, 40.0) for _ in range(30)]
    blocks = build(simulate(rows), engine(kv_cache_memory_bytes=36 * 2**20, block_size=128), values)
    tokens = build(simulate(rows), engine(kv_cache_memory_bytes=36 * 2**20), values)
    assert blocks.config.usable_kv_tokens() == 4480.0
    assert blocks.config.footprint(384.0, 384.0) == 768.0
    s_blocks, s_tokens = pm.state(blocks, blocks.config), pm.state(tokens, tokens.config)
    assert s_tokens.preempt_share == 0.0
    assert s_blocks.preempt_share == pytest.approx(1 - 4480 / (6 * 768))


def test_unknown_inputs_stay_unknown_and_lower_the_confidence() -> None:
    values = {**VALUES, "kv_cache_tokens": None}
    m = build(simulate(busy_rows()), engine(), values)
    assert "kv_cache_tokens" in m.missing and m.kv_per_running is None
    p = pm.predict(m, "max_num_seqs", 64)
    full = pm.predict(
        build(simulate(busy_rows()), engine(kv_cache_memory_bytes=2**33), VALUES), "max_num_seqs", 64
    )
    assert p.confidence < full.confidence
    with pytest.raises(ValueError, match="KV cache size"):
        pm.predict(m, "kv_cache_memory_bytes", 2**34)
    with pytest.raises(ValueError, match="memory"):
        pm.predict(m, "gpu_memory_utilization", 0.95)


def test_an_idle_window_is_insufficient_data() -> None:
    w = Window(max_age_s=1e9, clock=lambda: 1e6)
    c = {"gen": 0.0, "prompt": 0.0, "pre": 0.0, "done": 0.0, "steps": 0.0}
    w.add_snapshot(_page(0.0, c, 0, 0, 0))
    w.add_snapshot(_page(2.0, c, 0, 0, 0))
    with pytest.raises(pm.InsufficientData):
        build(w, engine(), VALUES)


def test_least_squares_refuses_a_singular_system() -> None:
    # every interval the same: nothing to fit
    w = simulate([(48.0, 0.5, 40.0)] * 6)
    facts = Observed.of_window(w).facts
    assert facts.busy_rows == 6
    assert pm.fit_step_time(facts.busy, facts.busy_rows, KV_TOKENS) is None


# ------------------------------------------------------------------ an ill-conditioned fit and the ITL tail
def _sums(**v: float) -> Sums:
    return Sums(v.get(t, 0.0) for t in TERMS)


# 1,000 steps of 10 ms, each 12 decodes and 24 prefill tokens on average: a 1,012-token chunk (a
# 1,024-token budget beside 12 decodes) in about one step of 42
BUSY = _sums(dt=10.0, steps=1000.0, decode_steps=12_000.0, prefill_steps=24_000.0)
CFG = pm.Config(12.0, 1024.0, 32768.0, None, None, None)
ILL = pm.StepTime(0.00858, 0.0, 59e-6, "none", 60, 0.08)  # the mean step kept: 8.58 ms + 24 x 59 us


def _itl(above_25ms: float) -> Histogram:
    """12,000 ITL samples: 80% under 10 ms, ``above_25ms`` of them over 25 ms, none over 50 ms."""
    total = 12_000.0
    return Histogram(
        ((0.01, 0.8 * total), (0.025, (1 - above_25ms) * total), (0.05, total), (float("inf"), total)),
        total,
        total * 0.01,
    )


def test_an_ill_conditioned_prefill_cost_is_held_to_the_itl_tail_it_would_have_made() -> None:
    # at 59 us a chunk step is 10 ms + 59 us x 988 = 68 ms: 2.4% of the ITL samples (the chunk
    # steps' share) over 50 ms; the histogram has 0.5% over 25 ms, so the chunk steps were under 25 ms
    got = pm._bounded_by_itl(ILL, _itl(0.005), BUSY, CFG, 1028.0)
    assert got.c == pytest.approx((0.025 - 0.010) / (1012 - 24))
    assert got.a + got.c * 24 == pytest.approx(ILL.a + ILL.c * 24)  # the mean step it was fitted to
    assert "ITL histogram" in got.basis
    # 2% over 25 ms (most of the chunk steps' 2.4%) but none over 50 ms: under 50 ms, the next bound
    assert pm._bounded_by_itl(ILL, _itl(0.02), BUSY, CFG, 1028.0).c == pytest.approx(0.040 / 988)
    # a well-conditioned fit, or one that already fits under the tail: unchanged; never raised
    # (a tail can have other causes: preemption, the front end)
    good = dataclasses.replace(ILL, r2=0.9)
    assert pm._bounded_by_itl(good, _itl(0.005), BUSY, CFG, 1028.0) == good
    cheap = dataclasses.replace(ILL, a=0.0097, c=10e-6)
    assert pm._bounded_by_itl(cheap, _itl(0.005), BUSY, CFG, 1028.0) == cheap
    # a chunk in every step (prefill per step over the chunk): no tail of its own
    full = _sums(dt=10.0, steps=1000.0, decode_steps=12_000.0, prefill_steps=1_012_000.0)
    assert pm._bounded_by_itl(ILL, _itl(0.005), full, CFG, 1028.0) == ILL


# ------------------------------------------------------------------ a CPU fit that could not price a decode
def test_a_cpu_fit_without_a_decode_price_prices_every_token_alike() -> None:
    """On a CPU every token of a step, decode or prefill, goes through the same layers: where the
    batch hardly varied (three decodes a step, here), least squares cannot price a decode apart
    and its prefill price absorbs what the decodes cost. The fallback fits one price for every
    token of a step (cpu-open-bursty-below.before: 420 us a token and 6.7 ms a step, where the
    two-term fit's copied prefill price was 639 us); the mean step is kept either way."""
    a, c = 0.0066, 420e-6
    rows = [
        Row(t=2.0 * i, dt=2.0, steps=2.0 / (a + c * (d + p)), decode=d, prefill=p, running=d,
            waiting=0.0, kv_usage=None, preemptions=0.0, finished=1.0, engines=1)
        for i, (d, p) in enumerate([(3.0, 0.0), (3.0, 8.0), (3.0, 2.0), (2.9, 12.0), (3.1, 5.0), (3.0, 1.0)])
    ]  # fmt: skip
    sums = Sums(sum(col) for col in zip(*(r.terms() for r in rows), strict=True))
    # what least squares gives when it drops the decode term: the prefill price carries the decodes
    two_term = pm.StepTime(0.0, 0.0, 639e-6, "none", len(rows), 0.3)
    got = pm._tokens_alike(sums, two_term)
    assert (got.a, got.k, got.c) == (pytest.approx(a), pytest.approx(c), pytest.approx(c))
    assert got.feature == "decode" and "decode as prefill (CPU)" in got.basis
    assert got.r2 == pytest.approx(1.0)
    # one token a step, always: nothing to fit a price from, the copy stands
    flat = Sums(sum(col) for col in zip(*(rows[0].terms() for _ in range(4)), strict=True))
    assert pm._tokens_alike(flat, two_term) == dataclasses.replace(
        two_term, k=two_term.c, feature="decode", basis=got.basis
    )


def test_without_a_step_counter_a_prompt_s_prefix_cache_hit_is_not_prefill() -> None:
    """A version without the iteration-tokens histogram: the steps are the decodes over the batch
    and the prefill is the prompt tokens counted, less those found in the prefix cache (vLLM
    counts every prompt token in prompt_tokens_total, computed or not)."""

    def page(t: float, gen: float, prompt: float, hits: float) -> Snapshot:
        fams = {
            n.NUM_RUNNING: _fam(n.NUM_RUNNING, "gauge", 10.0),
            n.NUM_WAITING: _fam(n.NUM_WAITING, "gauge", 0.0),
            n.GENERATION_TOKENS: _fam(n.GENERATION_TOKENS, "counter", gen),
            n.PROMPT_TOKENS: _fam(n.PROMPT_TOKENS, "counter", prompt),
            n.PREFIX_CACHE_HITS: _fam(n.PREFIX_CACHE_HITS, "counter", hits),
        }
        return Snapshot(t, fams)

    row = row_between(page(0.0, 0.0, 0.0, 0.0), page(2.0, 1000.0, 4000.0, 3000.0))
    assert row is not None and row.steps == 100  # 1,000 tokens decoded 10 at a time
    assert row.prefill == pytest.approx(1000 / 100)  # 4,000 prompt tokens, 3,000 of them hits
    no_hits = row_between(page(0.0, 0.0, 0.0, 0.0), page(2.0, 1000.0, 4000.0, 0.0))
    assert no_hits is not None and no_hits.prefill == pytest.approx(4000 / 100)
