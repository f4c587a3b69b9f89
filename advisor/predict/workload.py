"""The workload the simulator replays, fitted from the window, and goodput per request.

Pure: it reads the intake's busy intervals (:class:`advisor.predict.intake.Row`), every
interval's arrivals (:class:`advisor.predict.intake.Tally`) and the fitted model's length
statistics; it returns values. Nothing here does I/O.

- **Arrivals**, per interval: ``finished + the change of (waiting + running)`` between its two
  pages (the open arrivals' rate and burstiness over every interval, idle ones included). When
  the requests in the system (waiting + running, at the pages) sit at a plateau at their highest,
  the dips of a client between a response and its next request allowed (see
  :func:`fit_arrivals`), the load is taken as a **closed loop** of that many clients (what
  ``vllm bench serve --max-concurrency C`` sends); otherwise as **open arrivals** at the mean
  rate, with their burstiness: the per-interval arrival counts' variance over their mean (1 for
  Poisson) gives the gamma shape of the gaps (``1 / dispersion``), as ``vllm bench serve
  --burstiness`` draws them, once what sampling noise can make of Poisson arrivals is taken off
  (:data:`DISPERSION_Z`). :class:`Arrivals` says which was inferred and from what. A draw of
  open arrivals is scaled to the rate inferred exactly (its last arrival at n / rate, as
  ``vllm bench serve`` scales its own), so that a decision is asked at the measured rate and not
  at a draw's, a few percent off, which near the knee would decide the queue alone.
- **A loop already running** when the window began (its start not in the window: no interval
  before the first busy one, and waiting + running not rising to the plateau from under half
  of it) is simulated as a loop starts, every client at once, and its first round (each
  client's first request) is not counted (:attr:`Arrivals.steady`): the latencies and goodput
  are the loop's as a live server runs it, not the first round's wave, which a benchmark's
  start has and a live loop does not (the first round's prompts prefilled together were the
  TTFT p95 of 400 requests of 24-48 clients, 1.7-4.9x what the requests after it measured:
  docs/prediction.md). A loop whose start is in the window is simulated as it began, counted
  whole; so is one of more than ``FIRST_ROUND_MAX`` clients (too long a first round to
  simulate apart).
- **Lengths**: prompt and output lengths drawn lognormal with the mean of vLLM's token
  histograms and the sigma fitted to their buckets (:mod:`advisor.predict.lengths`), else
  through their p95 (a constant where p95 is not above the mean).
- The same seed gives the same requests for every candidate (common random numbers): a
  difference between two simulated candidates is the knob's, not the sampling's.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from advisor.predict.intake import Row, Tally
from advisor.predict.simulator import Done, Request

HELD = 0.8  # a closed loop: waiting + running at its highest in 80% of the plateau's intervals
PLATEAU_SHARE = 0.25  # ... and the plateau a quarter of the busy intervals at least
Z95 = 1.6448536269514722
# the dispersion's departure from Poisson's 1 that is taken, less this many of its standard
# errors under Poisson arrivals (sqrt(2 / (n - 1)) over n intervals): ~33 intervals of Poisson
# arrivals read 0.94-1.58 (gamma shape 0.63-1.06 for 1; the pages' gauge, read between the
# counters, adds to it), and the advice's simulations near the knee swing on that shape
DISPERSION_Z = 2.0


FIRST_ROUND_MAX = 400  # a steady loop's first round simulated apart up to this many clients


@dataclass(frozen=True)
class Arrivals:
    kind: str  # closed | open
    clients: int | None  # closed loop: the clients
    rate: float | None  # open: requests per second
    shape: float  # open: gamma shape of the gaps (1: Poisson; below 1: burstier)
    why: str  # what it was inferred from
    # a closed loop already running when the window began (its start not in the window): the
    # simulation starts its clients together, as a loop starts, and counts none of that first
    # round (each client's first request): what is counted is the loop as the window saw it
    steady: bool = False

    @property
    def first_round(self) -> int:
        """Requests simulated before the counted ones: a steady loop's first round."""
        return (self.clients or 0) if self.steady else 0

    def simulated(self, counted: int) -> int:
        """The requests to simulate for ``counted`` counted ones: a steady loop's first round
        before them, and a closed loop's every client at least once (a loop of N clients that
        N requests do not fill is a wave of fewer: dense-kv-tp's 1,024 clients simulated as
        400 requests ran 315 at once where the server ran 609, at 44% of the KV cache where
        it held 77%)."""
        if self.kind == "closed" and not self.steady:
            counted = max(counted, self.clients or 0)
        return counted + self.first_round


def _at_page(r: Row) -> float:
    """Waiting + running per engine at the row's later page (its two pages' mean where the row
    does not carry the page's own value)."""
    return r.in_system_end if r.in_system_end is not None else r.in_system


def _arrived(a: Row | None, b: Row) -> float | None:
    """Requests that arrived (all engines) between ``b``'s two pages: finished + the change of
    waiting + running between those pages themselves. Without the pages' own values: between
    the two rows' means (``a`` the row before; None for the first)."""
    if b.in_system_start is not None and b.in_system_end is not None:
        return max(0.0, (b.finished + b.in_system_end - b.in_system_start) * b.engines)
    if a is None:
        return None
    return max(0.0, (b.finished + b.in_system - a.in_system) * b.engines)


def fit_arrivals(rows: Sequence[Row], tallies: Sequence[Tally] = ()) -> Arrivals:
    """The arrival process from the busy intervals (running > 0), and open arrivals' rate and
    burstiness from every interval's tally where ``tallies`` are given (the idle intervals
    between bursts are part of an open load's time: a bursty load that its server drains between
    scrapes, cpu-open-bursty-below at 1.2/s, read 2.8/s over its busy intervals alone).
    ValueError with fewer than two busy intervals.

    A closed loop of C clients keeps C requests in the system (each sends the next one as its
    last finishes): waiting + running sits at its highest value from the end of the ramp until
    the drain of a finite load. A page can catch a client between a response and its next
    request, missing from waiting + running: it finished a request in the interval before that
    page, and it is back by the next page (its gap is shorter than a scrape interval: with
    requests finishing together, ``ignore_eos`` and equal lengths, several are caught at once).
    Open arrivals only touch their highest value at a peak (and past the knee it climbs to it),
    and a fall from it lasts. So, on the pages themselves (not the two-end means of an
    interval, which spread one page's dip over two intervals): closed when, from the first page
    at the highest waiting + running (within half a request or 5%) to the last one, at least
    ``HELD`` of the pages are there or are a client gap (the deficit no more than the requests
    finished in the interval before the page, and the next page at the highest again or the
    deficit one request: with short requests one client is often between two of them on
    consecutive pages, cpu-prefill-budget-after), and that
    plateau spans at least ``PLATEAU_SHARE`` of the busy intervals (and three); open otherwise."""
    busy = [r for r in rows if r.running > 0 and r.dt > 0]
    if len(busy) < 2:
        raise ValueError("fewer than two busy intervals: the arrivals cannot be fitted")
    load = [_at_page(r) for r in busy]
    top = max(load)
    band = max(0.5, 0.05 * top)
    at_top = [i for i, x in enumerate(load) if x >= top - band]
    span_rows = at_top[-1] - at_top[0] + 1
    gaps = [
        i
        for i in range(at_top[0], at_top[-1] + 1)
        if load[i] < top - band
        and top - load[i] <= busy[i].finished + band
        and (load[i + 1] >= top - band or top - load[i] <= 1 + band)
    ]
    held = (len(at_top) + len(gaps)) / span_rows
    plateau = top  # a closed loop's clients: the pages catch a finished one's next request late, never early
    every = bool(tallies)
    if not every:  # rows made elsewhere, without the idle intervals: the busy ones' own arrivals
        tallies = [
            Tally(b.t, b.dt, c, b.engines)
            for a, b in zip([None, *busy[:-1]], busy, strict=True)
            if (c := _arrived(a, b)) is not None
        ]
    counts = [x.arrived for x in tallies]
    dts = [x.dt for x in tallies]
    engines = tallies[0].engines if tallies else busy[0].engines
    # the rate over the intervals that had arrivals: a drain at the end of a finite load (or a
    # lull before its start) is not part of the rate the server was offered
    # (an interval "has arrivals" at a quarter of the median count: the pages' two-end averages
    # leave a request or two of noise in a drain)
    floor = max(0.5 * engines, 0.25 * statistics.median(counts)) if counts else 0.0
    arriving = [i for i, c in enumerate(counts) if c >= floor]
    rate = 0.0
    lo, hi = 0, len(counts)
    if arriving:
        lo, hi = arriving[0], arriving[-1] + 1
        span = sum(dts[lo:hi])
        rate = sum(counts[lo:hi]) / span if span > 0 else 0.0
    spans = span_rows >= max(3, PLATEAU_SHARE * len(busy))
    if held >= HELD and spans and plateau >= 1:
        n = max(1, round(plateau * busy[0].engines))
        gap_words = f" or a client gap ({len(gaps)})" if gaps else ""
        why = (
            f"waiting + running held at {plateau:.0f} per engine over {span_rows} of {len(busy)} busy "
            f"intervals ({held:.0%} of them at it{gap_words}): a closed loop of {n} clients"
        )
        # the loop's start in the window: an interval before the first busy one (idle, or the
        # one the clients arrived in), or waiting + running rising from under half the plateau
        first = busy[0]
        start = first.in_system_start if first.in_system_start is not None else first.in_system
        began = every and tallies[0].t < first.t - 1e-9
        if began or start < plateau / 2:
            why += ", started in the window"
            return Arrivals("closed", n, None, 1.0, why)
        if n > FIRST_ROUND_MAX:
            why += (
                f", running before the window began; its first round ({n} requests, over "
                f"{FIRST_ROUND_MAX}) simulated as a wave and counted: too long to simulate apart"
            )
            return Arrivals("closed", n, None, 1.0, why)
        why += ", running before the window began (its first round simulated, not counted)"
        return Arrivals("closed", n, None, 1.0, why, steady=True)
    # the dispersion of the counts over the steady intervals (the ramp and the drain of a
    # finite load are not its burstiness): the middle 80% of the span the rate is taken over
    # (a queue draining after the last arrival is busy without arrivals: follow-misconf-r2's
    # 33 such intervals of 72 read as gamma shape 0.19 for the Poisson arrivals it was sent)
    offered = counts[lo:hi]
    mid = offered[len(offered) // 10 : len(offered) - len(offered) // 10] or offered
    m = statistics.fmean(mid) if mid else 0.0
    disp = statistics.pvariance(mid) / m if m > 0 and len(mid) > 1 else 1.0
    taken = beyond_noise(disp, len(mid))
    shape = 1.0 / max(taken, 1e-3)
    burst = "Poisson, within sampling noise" if taken == 1.0 else f"gamma shape {min(shape, 100.0):.2g}"
    return Arrivals(
        "open",
        None,
        rate,
        min(shape, 100.0),
        f"waiting + running held no plateau (its highest, {top:.0f}, in {len(at_top)} of {len(busy)} busy intervals): "
        f"open arrivals of finished + change of waiting + running, {rate:.2f}/s, dispersion "
        f"{disp:.2f} over {len(mid)} intervals{' (idle ones included)' if every else ''}: {burst}",
    )


def beyond_noise(dispersion: float, n: int) -> float:
    """The dispersion of ``n`` intervals' arrival counts with what sampling noise can make of
    Poisson arrivals taken off: its departure from 1 less :data:`DISPERSION_Z` standard errors
    (``sqrt(2 / (n - 1))``), none where that is all of it (1: Poisson). Fewer than two
    intervals: 1."""
    if n < 2:
        return 1.0
    excess = dispersion - 1.0
    kept = max(0.0, abs(excess) - DISPERSION_Z * math.sqrt(2.0 / (n - 1)))
    return 1.0 + math.copysign(kept, excess)


def lognormal(mean: float, p95: float | None) -> tuple[float, float]:
    """(mu, sigma) of the lognormal with this mean and p95 (sigma 0 where p95 <= mean)."""
    if mean <= 0:
        raise ValueError("a length's mean must be positive")
    if p95 is None or p95 <= mean:
        return math.log(mean), 0.0
    # ln p95 - ln mean = Z95 * s - s^2 / 2: the smaller root
    d = math.log(p95 / mean)
    disc = Z95 * Z95 - 2 * d
    s = Z95 - math.sqrt(disc) if disc > 0 else Z95
    return math.log(mean) - s * s / 2, s


def requests(
    n: int,
    prompt: tuple[float, float | None],
    output: tuple[float, float | None],
    arrivals: Arrivals,
    seed: int = 0,
    max_len: int | None = None,
    sigmas: tuple[float | None, float | None] = (None, None),
) -> list[Request]:
    """``n`` requests: lengths lognormal with the (mean, p95) given, or with the mean and the
    sigma of ``sigmas`` (prompt, output) where it is known (:mod:`advisor.predict.lengths`);
    arrivals by ``arrivals`` (none for a closed loop). The same seed, the same requests."""
    rng = random.Random(seed)
    pm, ps = _spread(prompt, sigmas[0])
    om, osd = _spread(output, sigmas[1])
    out: list[Request] = []
    t = 0.0
    for _ in range(n):
        p = max(1, round(rng.lognormvariate(pm, ps)))
        g = max(1, round(rng.lognormvariate(om, osd)))
        if max_len is not None:
            p = min(p, max_len - 1)
            g = max(1, min(g, max_len - p))
        at = None
        if arrivals.kind == "open":
            if not arrivals.rate or arrivals.rate <= 0:
                raise ValueError("open arrivals need a positive rate")
            t += rng.gammavariate(arrivals.shape, 1.0 / (arrivals.shape * arrivals.rate))
            at = t
        out.append(Request(p, g, at))
    if arrivals.kind == "open" and t > 0 and arrivals.rate:
        # at the rate inferred, exactly: the n-th arrival at n / rate, the gaps' pattern the
        # draw's (as ``vllm bench serve`` scales its draws). The decision is asked at the rate
        # the window measured; a draw's own rate, a few percent either way, is noise that near
        # the knee decides the queue alone
        scale = n / arrivals.rate / t
        out = [Request(r.prompt, r.output, (r.arrival or 0.0) * scale) for r in out]
    return out


def _spread(length: tuple[float, float | None], sigma: float | None) -> tuple[float, float]:
    mean, p95 = length
    if sigma is None:
        return lognormal(mean, p95)
    if mean <= 0:
        raise ValueError("a length's mean must be positive")
    return math.log(mean) - sigma * sigma / 2, sigma


def split(
    reqs: Sequence[Request], arrivals: Arrivals, engines: int
) -> list[tuple[list[Request], int | None]]:
    """The load over ``engines`` data-parallel copies (round robin): each copy's requests and
    its clients (closed loop) -- the DP coordinator's balancing taken as even."""
    if engines < 1:
        raise ValueError("at least one engine")
    out = []
    for e in range(engines):
        share = list(reqs[e::engines])
        clients = None
        if arrivals.kind == "closed":
            assert arrivals.clients is not None
            clients = max(1, arrivals.clients // engines + (1 if e < arrivals.clients % engines else 0))
        out.append((share, clients))
    return out


def meets(ttft: float, tpot: float | None, e2e: float, targets: Mapping[str, float]) -> bool:
    """One request meets every target (``vllm bench serve --goodput``'s test):
    ``ttft_p95_seconds`` against its TTFT, ``itl_p95_seconds`` against its TPOT (bench's
    per-request inter-token mean), ``e2e_seconds`` against its E2E."""
    ttft_t = targets.get("ttft_p95_seconds")
    itl_t = targets.get("itl_p95_seconds")
    e2e_t = targets.get("e2e_seconds")
    if ttft_t is not None and ttft > ttft_t:
        return False
    if itl_t is not None and tpot is not None and tpot > itl_t:
        return False
    return e2e_t is None or e2e <= e2e_t


def goodput(done: Sequence[Done], targets: Mapping[str, float]) -> float | None:
    """The share of requests meeting every target (:func:`meets`). None without requests."""
    if not done:
        return None
    return sum(meets(d.ttft, d.tpot, d.e2e, targets) for d in done) / len(done)


def goodput_tokens_per_second(
    done: Sequence[Done], targets: Mapping[str, float], span: float
) -> float | None:
    """Output tokens per second of the requests meeting every target, over ``span`` seconds
    (what ``vllm bench serve --goodput`` reports, in tokens). None without requests or span."""
    if not done or span <= 0:
        return None
    return sum(d.output for d in done if meets(d.ttft, d.tpot, d.e2e, targets)) / span


def quantile(xs: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (linear between order statistics), None when empty."""
    return quantile_sorted(sorted(xs), q)


def quantile_sorted(s: Sequence[float], q: float) -> float | None:
    """:func:`quantile` of values already sorted (several quantiles of one list, sorted once)."""
    if not s:
        return None
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)
