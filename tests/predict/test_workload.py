"""The load inferred from a window's pages (``workload.fit_arrivals``), on pages sampled from
simulated runs whose load is known: a closed loop of C clients with its ramp and drain, open
arrivals at a rate below and past the knee, and bursts. The simulator stands in for a server
here so that the truth is known exactly; the recorded H200 and CPU runs (closed and open) are
judged by validation/simulation.py and docs/validation.md."""

from __future__ import annotations

import bisect
import itertools
import math
import random
import statistics
from collections.abc import Iterator

import pytest

from advisor.predict import workload as wl
from advisor.predict.intake import Row, Tally
from advisor.predict.perfmodel import StepTime
from advisor.predict.simulator import Engine, Request, Result, simulate

# 10 ms a step, 0.2 ms per decode, 0.01 ms per prefill token: 16 decodes take ~13 ms
FIT = StepTime(0.010, 2e-4, 1e-5, "decode", 10, None)
ENG = Engine(max_num_seqs=16, max_num_batched_tokens=2048, kv_blocks=100_000, block_size=16)
SCRAPE = 5.0  # seconds between pages (the daemon's default interval)


def _scrapes(res: Result, every: float) -> Iterator[tuple[float, float, int, int, int, int, int, int]]:
    """Each interval a scraper every ``every`` seconds would see of the run: (t0, t, running and
    waiting at both pages, the steps and the requests finished between them)."""
    ts = [s.t for s in res.steps]
    ends = sorted(d.arrival + d.e2e for d in res.done)
    prev: tuple[float, int, int] | None = None
    t = every
    while t <= res.end + every:
        i = bisect.bisect_right(ts, t) - 1
        run, wait = (res.steps[i].running, res.steps[i].waiting) if i >= 0 else (0, 0)
        if prev is not None:
            t0, r0, w0 = prev
            steps = bisect.bisect_right(ts, t) - bisect.bisect_right(ts, t0)
            fin = bisect.bisect_right(ends, t) - bisect.bisect_right(ends, t0)
            yield t0, t, r0, w0, run, wait, steps, fin
        prev = (t, run, wait)
        t += every


def pages(res: Result, every: float = SCRAPE) -> list[Row]:
    """The busy rows a scraper every ``every`` seconds would have made of the run: the
    gauges (running, waiting) at each page, the finished count between pages."""
    return [
        Row(
            t,
            t - t0,
            steps,
            1.0,
            0.0,
            (r0 + run) / 2,
            (w0 + wait) / 2,
            None,
            0.0,
            fin,
            1,
            in_system_start=r0 + w0,
            in_system_end=run + wait,
        )
        for t0, t, r0, w0, run, wait, steps, fin in _scrapes(res, every)
        if r0 and run and steps
    ]


def tallies(res: Result, every: float = SCRAPE) -> list[Tally]:
    """Every interval's arrivals, as a scraper every ``every`` seconds would count them:
    finished + the change of waiting + running between its pages, idle intervals included."""
    return [
        Tally(t, t - t0, max(0.0, fin + run + wait - r0 - w0), 1)
        for t0, t, r0, w0, run, wait, _steps, fin in _scrapes(res, every)
    ]


def _reqs(n: int, rate: float | None = None, shape: float = 1.0, seed: int = 1) -> list[Request]:
    arr = (
        wl.Arrivals("open", None, rate, shape, "test")
        if rate
        else wl.Arrivals("closed", 1, None, 1.0, "test")
    )
    return wl.requests(n, (200, 300), (120, 180), arr, seed=seed)


def test_a_closed_loop_with_its_ramp_and_drain_is_closed_with_its_clients() -> None:
    res = simulate(ENG, FIT, _reqs(400), clients=24, max_steps=200_000)
    assert not res.truncated
    arr = wl.fit_arrivals(pages(res))
    assert (arr.kind, arr.clients) == ("closed", 24), arr.why
    assert "closed loop of 24" in arr.why


@pytest.mark.parametrize("rate", [4.0, 9.0])
def test_poisson_arrivals_below_the_knee_are_open_at_their_rate(rate: float) -> None:
    res = simulate(ENG, FIT, _reqs(1500, rate), max_steps=900_000)
    arr = wl.fit_arrivals(pages(res))
    assert arr.kind == "open", arr.why
    assert arr.rate == pytest.approx(rate, rel=0.15)
    assert 0.5 < arr.shape < 3.0, arr.why  # Poisson: shape 1 (read through 5 s pages)


def test_arrivals_past_the_knee_are_open_though_the_queue_only_climbs() -> None:
    # 16 running take ~13 ms a step for ~120 tokens each: ~10 req/s; 14 req/s is past the knee
    res = simulate(ENG, FIT, _reqs(1500, 14.0), max_steps=900_000)
    rows = pages(res)
    assert max(r.waiting for r in rows) > 50  # the queue did grow
    arr = wl.fit_arrivals(rows)
    assert arr.kind == "open", arr.why


def test_bursts_read_as_a_small_gamma_shape() -> None:
    poisson = wl.fit_arrivals(pages(simulate(ENG, FIT, _reqs(1500, 4.0, 1.0), max_steps=900_000)))
    bursty = wl.fit_arrivals(pages(simulate(ENG, FIT, _reqs(1500, 4.0, 0.2), max_steps=900_000)))
    assert bursty.kind == poisson.kind == "open"
    assert bursty.shape < 0.5 * poisson.shape, (bursty.why, poisson.why)


def test_poisson_arrivals_read_as_poisson_whatever_the_draw() -> None:
    """Poisson arrivals' per-interval counts have a dispersion of 1 only on average: over 33
    intervals one draw reads 0.6-1.5 (the recorded runs at --burstiness 1 read 0.94-1.58, gamma
    shape 0.63-1.06). What sampling noise can make of Poisson is taken off, so every draw of
    them reads Poisson or near it (a draw past two standard errors, about one in twenty, keeps
    the rest), and bursts far beyond it keep most of their dispersion."""
    shapes, raw = [], []
    for seed in range(40):
        rng = random.Random(seed)
        t, counts = 0.0, [0] * 40
        while True:
            t += rng.expovariate(4.5)
            if t >= 80.0:
                break
            counts[int(t // 2.0)] += 1
        disp = statistics.pvariance(counts) / statistics.fmean(counts)
        raw.append(1.0 / disp)
        shapes.append(1.0 / wl.beyond_noise(disp, len(counts)))
    assert min(raw) < 0.7 and max(raw) > 1.3  # the draws' own spread: the case
    assert min(shapes) > 0.85 and sum(s == 1.0 for s in shapes) >= 36, shapes
    assert wl.beyond_noise(1.3, 33) == 1.0  # within two standard errors (0.25 each)
    assert wl.beyond_noise(4.4, 38) == pytest.approx(4.4 - 2.0 * math.sqrt(2.0 / 37))
    assert wl.beyond_noise(0.2, 33) == pytest.approx(0.2 + 2.0 * 0.25)  # smoother than Poisson, less so
    assert wl.beyond_noise(3.0, 1) == 1.0  # one interval: nothing to tell


def test_bursts_the_server_drains_between_pages_are_read_at_their_rate_over_every_interval() -> None:
    """Bursty arrivals at 1 request/s of short requests: the server drains each burst well within
    a page interval, so few intervals have requests running at both pages. Their arrivals over
    their time alone are the bursts' rate (cpu-open-bursty-below, recorded at 1.2/s, read 2.8/s
    so); over every interval, idle ones included, the rate is the load's, and the idle intervals
    between bursts make the burstiness show."""
    reqs = [Request(200, 60, r.arrival) for r in _reqs(400, 1.0, 0.25)]
    res = simulate(ENG, FIT, reqs, max_steps=900_000)
    rows, every = pages(res), tallies(res)
    assert len(rows) < 0.2 * len(every)  # most intervals are idle at one page or both
    busy_only = wl.fit_arrivals(rows)
    arr = wl.fit_arrivals(rows, every)
    assert arr.kind == "open", arr.why
    assert arr.rate == pytest.approx(1.0, rel=0.15), arr.why
    # the busy intervals alone read the bursts' rate, above the load's (this draw: 1.2/s)
    assert busy_only.rate is not None and busy_only.rate > 1.1 * arr.rate, busy_only.why
    assert arr.shape < 0.5, arr.why
    assert "idle ones included" in arr.why


def _page_rows(load: list[float], finished: list[float]) -> list[Row]:
    """Busy rows between pages whose waiting + running is ``load`` (one more page than rows)."""
    rows = []
    for i, (a, b) in enumerate(itertools.pairwise(load)):
        run0, run1 = min(a, 8), min(b, 8)
        rows.append(
            Row(
                2.0 * (i + 1),
                2.0,
                100,
                1.0,
                0.0,
                (run0 + run1) / 2,
                (a - run0 + b - run1) / 2,
                None,
                0.0,
                finished[i],
                1,
                in_system_start=a,
                in_system_end=b,
            )
        )
    return rows


def test_a_page_catching_clients_between_requests_is_still_the_closed_loop() -> None:
    """cpu-cap-under-load's pattern: ten clients, eight requests finishing together, and a page
    now and then catching some clients between a response and their next request (the deficit
    no more than the finishes just before, the next page back at ten). The intervals' two-end
    means would show two low intervals per low page; on the pages it is one client gap each."""
    load = [10.0] + [10.0, 10.0, 4.0, 10.0, 10.0, 10.0, 7.0, 10.0] * 4
    fin = [0.0 if x == 10.0 else 8.0 for x in load[1:]]
    arr = wl.fit_arrivals(_page_rows(load, fin))
    assert (arr.kind, arr.clients) == ("closed", 10), arr.why
    assert "client gap" in arr.why


def test_a_closed_loop_running_before_the_window_is_steady_and_one_started_in_it_is_not() -> None:
    """A live server's loop has no start in the window: its first round is simulated and not
    counted (the loop as the window saw it). A window holding the loop's start (an interval
    before the first busy one, or waiting + running rising from under half the plateau) is
    simulated as it began, all clients at once; so is a loop of more clients than a first round
    simulated apart may cost."""
    load = [24.0] + [24.0, 24.0, 20.0, 24.0] * 5
    fin = [0.0 if x == 24.0 else 4.0 for x in load[1:]]
    rows = _page_rows(load, fin)
    live = wl.fit_arrivals(rows)
    assert (live.kind, live.clients, live.steady, live.first_round) == ("closed", 24, True, 24), live.why
    assert "running before the window began" in live.why
    # the same with an idle interval before the first busy one in the window
    idle = Tally(rows[0].t - rows[0].dt, 2.0, 0.0, 1)
    tallied = [idle] + [
        Tally(r.t, r.dt, r.finished + (r.in_system_end or 0) - (r.in_system_start or 0), 1) for r in rows
    ]
    began = wl.fit_arrivals(rows, tallied)
    assert (began.kind, began.steady, began.first_round) == ("closed", False, 0), began.why
    assert "started in the window" in began.why
    # a ramp to the plateau in the window's pages
    ramp = wl.fit_arrivals(_page_rows([2.0, 12.0, *load], [0.0, 0.0, *fin]))
    assert (ramp.kind, ramp.steady) == ("closed", False), ramp.why
    # more clients than a first round simulated apart
    big = wl.fit_arrivals(_page_rows([600.0] * 12, [0.0] * 11))
    assert (big.kind, big.clients, big.steady) == ("closed", 600, False), big.why
    assert f"over {wl.FIRST_ROUND_MAX}" in big.why
    # simulated: a steady loop's first round before the counted requests; a loop started in the
    # window with each of its clients' requests at least (400 requests are no loop of 600)
    assert (live.simulated(400), began.simulated(400), big.simulated(400), big.simulated(900)) == (
        424,
        400,
        600,
        900,
    )
    opened = wl.Arrivals("open", None, 2.0, 1.0, "")
    assert opened.simulated(400) == 400


def test_a_fall_from_the_top_that_lasts_is_open() -> None:
    """The same dips held for two pages, or deeper than the finishes before them: open arrivals
    (a closed loop's clients are back within a scrape interval)."""
    load = [10.0] + [10.0, 10.0, 4.0, 5.0, 10.0, 10.0, 7.0, 6.0] * 4
    fin = [2.0] * (len(load) - 1)
    assert wl.fit_arrivals(_page_rows(load, fin)).kind == "open"


def test_a_queue_draining_after_the_last_arrival_is_not_burstiness() -> None:
    """Poisson arrivals past the knee for a finite load: the queue they leave drains for a long
    time after the last one (busy intervals with no arrival). The burstiness is read over the
    span the rate is read over, so it is still Poisson's (follow-misconf-r2.before: 33 of 72 busy
    intervals drained, read as gamma shape 0.19 before)."""
    res = simulate(ENG, FIT, _reqs(1200, 14.0), max_steps=900_000)
    rows = pages(res)
    last_arrival = max(d.arrival for d in res.done)
    drained = [r for r in rows if r.t - r.dt > last_arrival + SCRAPE]
    assert len(drained) >= 0.2 * len(rows)  # a long drain: the case
    arr = wl.fit_arrivals(rows)
    assert arr.kind == "open" and arr.rate == pytest.approx(14.0, rel=0.15), arr.why
    assert 0.5 < arr.shape < 3.0, arr.why


def test_lengths_drawn_with_a_fitted_sigma_keep_the_mean() -> None:
    arr = wl.Arrivals("closed", 4, None, 1.0, "test")
    reqs = wl.requests(4000, (1024, None), (512, None), arr, seed=3, sigmas=(0.07, 0.5))
    prompts, outputs = [r.prompt for r in reqs], [r.output for r in reqs]
    assert sum(prompts) / len(prompts) == pytest.approx(1024, rel=0.01)
    assert sum(outputs) / len(outputs) == pytest.approx(512, rel=0.03)
    assert max(prompts) < 1.4 * 1024  # sigma 0.07: +5 sigma is +35%
    assert max(outputs) > 2 * 512  # sigma 0.5: a tail


@pytest.mark.parametrize("shape", [1.0, 0.25])
def test_open_arrivals_are_drawn_at_the_rate_inferred_exactly(shape: float) -> None:
    """A draw of n arrivals puts its last at n / rate (as ``vllm bench serve`` scales its
    draws): a draw's own rate, a few percent off (seed 0's 400 Poisson gaps: 6.7% fast), is not
    the load's; the gaps' pattern stays the draw's."""
    draws = [_reqs(400, 4.5, shape, seed) for seed in range(3)]
    for reqs in draws:
        times = [r.arrival for r in reqs]
        assert all(t is not None for t in times)
        assert times == sorted(times)
        assert times[-1] == pytest.approx(400 / 4.5)
    assert len({round(d[100].arrival or 0.0, 6) for d in draws}) == 3  # the draws differ inside
