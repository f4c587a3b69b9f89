"""The scheduler simulator's engine rules and the workload, on small hand-built cases
(bounded requests and steps; nothing asserts seconds of wall time)."""

from __future__ import annotations

import pytest

from advisor.predict import workload as wl
from advisor.predict.intake import Row
from advisor.predict.perfmodel import StepTime
from advisor.predict.simulator import Engine, Request, simulate

# 10 ms a step, 0.1 ms per decode, 0.01 ms per prefill token
FIT = StepTime(0.010, 1e-4, 1e-5, "decode", 10, None)


def _eng(**kw: object) -> Engine:
    base: dict[str, object] = {
        "max_num_seqs": 4,
        "max_num_batched_tokens": 512,
        "kv_blocks": 1000,
        "block_size": 16,
    }
    base.update(kw)
    return Engine(**base)  # type: ignore[arg-type]


def test_cap_binds_the_batch() -> None:
    reqs = [Request(32, 20) for _ in range(10)]
    res = simulate(_eng(max_num_seqs=3), FIT, reqs, clients=10, max_steps=2000)
    assert not res.truncated and len(res.done) == 10
    assert max(s.running for s in res.steps) == 3
    assert max(s.waiting for s in res.steps) == 7


def test_budget_chunks_a_long_prompt() -> None:
    res = simulate(_eng(max_num_batched_tokens=100), FIT, [Request(350, 2)], clients=1, max_steps=100)
    # 350 prompt tokens in chunks of 100: four prefill steps, the first token after the fourth
    assert [s.prefill for s in res.steps[:4]] == [100, 100, 100, 50]
    assert res.done[0].ttft == pytest.approx(sum(s.dt for s in res.steps[:4]))


def test_long_prefill_threshold_caps_a_chunk() -> None:
    res = simulate(_eng(long_prefill_token_threshold=64), FIT, [Request(200, 2)], clients=1, max_steps=100)
    assert [s.prefill for s in res.steps[:4]] == [64, 64, 64, 8]


def test_decodes_first_then_admission_within_the_budget() -> None:
    # two running decodes take 2 of the budget's 50; the waiting prompt gets the other 48
    reqs = [Request(16, 50), Request(16, 50), Request(200, 2, None)]
    res = simulate(_eng(max_num_batched_tokens=50), FIT, reqs, clients=3, max_steps=200)
    # step 1: the two short prompts (32 tokens) and 18 of the long one
    assert res.steps[0].prefill == 50
    # step 2: two decodes, 48 prefill
    assert (res.steps[1].decode, res.steps[1].prefill) == (2, 48)


def test_a_missing_block_preempts_the_newest() -> None:
    # 6 blocks of 16: two requests of 40 prompt tokens (3 blocks each) fill the pool; the first
    # to need a fourth block takes it from the newest running one, which is recomputed later
    reqs = [Request(40, 30), Request(40, 30)]
    res = simulate(_eng(kv_blocks=6), FIT, reqs, clients=2, max_steps=1000)
    assert not res.truncated and len(res.done) == 2
    assert res.preemptions >= 1
    by = {d.idx: d for d in res.done}
    assert by[0].preempted == 0 and by[1].preempted >= 1
    assert by[1].e2e > by[0].e2e


def test_prefix_hits_skip_whole_blocks_of_the_prompt() -> None:
    res = simulate(_eng(prefix_hit_rate=0.5), FIT, [Request(100, 2)], clients=1, max_steps=10)
    assert res.steps[0].prefill == 100 - 48  # 50 tokens hit, rounded down to 3 blocks


def test_a_prompt_larger_than_the_cache_is_refused() -> None:
    with pytest.raises(ValueError, match="more KV blocks"):
        simulate(_eng(kv_blocks=2), FIT, [Request(100, 2)], clients=1, max_steps=10)


def _open(rate: float, n: int) -> list[Request]:
    arr = wl.Arrivals("open", None, rate, 1.0, "test")
    return wl.requests(n, (64, None), (32, None), arr, seed=1)


def _ttft_growth(done: list) -> float:
    by = sorted(done, key=lambda d: d.idx)
    first = sum(d.ttft for d in by[20:70]) / 50
    last = sum(d.ttft for d in by[-50:]) / 50
    return last / first


def test_open_loop_queue_grows_past_the_knee_closed_loop_does_not() -> None:
    eng = _eng(max_num_seqs=8)
    # capacity: ~8 requests per (32 steps x ~11 ms) ~ 22/s
    slow = simulate(eng, FIT, _open(10.0, 300), max_steps=20000)
    fast = simulate(eng, FIT, _open(60.0, 300), max_steps=20000)
    assert not slow.truncated and not fast.truncated
    assert max(s.waiting for s in slow.steps) < 20
    assert _ttft_growth(list(slow.done)) < 2
    # past the knee the queue (and the wait) grows with every request that arrives
    assert _ttft_growth(list(fast.done)) > 3
    # a closed loop of 30 clients: never more than the clients wait
    closed = simulate(eng, FIT, [Request(64, 32) for _ in range(300)], clients=30, max_steps=20000)
    assert max(s.waiting for s in closed.steps) <= 30
    assert _ttft_growth(list(closed.done)) < 1.5


def test_common_random_numbers_and_lengths() -> None:
    arr = wl.Arrivals("open", None, 5.0, 0.5, "test")
    a = wl.requests(50, (500, 900), (100, 200), arr, seed=7)
    assert a == wl.requests(50, (500, 900), (100, 200), arr, seed=7)
    _mu, s = wl.lognormal(500, 900)
    assert s > 0
    assert wl.lognormal(500, 400) == (pytest.approx(6.2146, abs=1e-3), 0.0)


def _row(t: float, running: float, waiting: float, finished: float) -> Row:
    return Row(t, 2.0, 100, running, 0.0, running, waiting, None, 0.0, finished, 1)


def test_arrivals_closed_when_the_load_holds_open_when_it_varies() -> None:
    closed = wl.fit_arrivals([_row(i * 2.0, 16, 16, 4) for i in range(10)])
    assert (closed.kind, closed.clients) == ("closed", 32)
    rows = [_row(i * 2.0, 4 + (i % 3) * 6, (i % 2) * 10, 3) for i in range(12)]
    open_ = wl.fit_arrivals(rows)
    assert open_.kind == "open" and open_.rate and open_.rate > 0
    assert "finished + change" in open_.why
    with pytest.raises(ValueError):
        wl.fit_arrivals(rows[:1])


def test_goodput_counts_requests_meeting_every_target() -> None:
    res = simulate(_eng(max_num_seqs=2), FIT, [Request(32, 10) for _ in range(6)], clients=6, max_steps=1000)
    all_ok = wl.goodput(res.done, {"ttft_p95_seconds": 100.0, "itl_p95_seconds": 1.0})
    assert all_ok == 1.0
    first_only = wl.goodput(res.done, {"ttft_p95_seconds": res.done[0].ttft * 1.01})
    assert first_only is not None and 0 < first_only < 1
    assert wl.goodput([], {}) is None


def test_data_parallel_copies_split_the_load() -> None:
    arr = wl.Arrivals("closed", 5, None, 1.0, "test")
    reqs = [Request(16 + i, 4) for i in range(7)]
    parts = wl.split(reqs, arr, 2)
    assert [c for _, c in parts] == [3, 2]
    assert [len(r) for r, _ in parts] == [4, 3]
    with pytest.raises(ValueError):
        wl.split(reqs, arr, 0)
