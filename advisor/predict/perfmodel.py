"""A performance model of the served engine, fitted from what it exports: what a knob change
will do, in numbers, before it is made.

Pure: it reads a :class:`~advisor.window.Window` of parsed pages, the engine's knobs and the
signal values, and returns values. Nothing here does I/O.

The model (per engine, steady state under the same load):

- **Step time** ``T = a + k * kv + c * p``: a fixed cost per step, a cost per KV token the
  decodes read (``kv``: KV cache usage x KV tokens) and a cost per prefill token in the step
  (``p``). Fitted by least squares over the recording's busy 2 s intervals, where a step's time
  is the interval over the steps in it (``vllm:iteration_tokens_total``'s count) and its tokens
  come from the token counters. Where the decodes' KV does not vary enough to fit ``k``, the
  decode tokens per step take its place; where nothing can be fitted, the change is predicted
  from ratios alone and the confidence says so. Where the intervals carried about the same
  prefill (R^2 low), the prefill cost is held to what the ITL histogram's tail allows for the
  steps that carry a whole chunk (``_bounded_by_itl``). On a GPU, a decode-only step whose batch
  is past the largest full CUDA graph under the cap runs piecewise, ``piecewise_s`` longer
  (:func:`with_graph_penalty`, advisor/predict/graphs.py).
- **The batch** ``B = min(cap, offered load, KV holds, budget allows)``: the offered load is what
  waits plus what runs (a closed loop of clients); the KV cache holds its tokens over the KV a
  running request holds on average (measured: usage x tokens over running); the token budget
  allows the batch whose prefill (prompt over output tokens per step per request) fits beside
  its decodes. Whichever is smallest binds.
- **Preemptions** start once the batch asks for more KV than requests hold at their end
  (prompt + output, in whole blocks; the cache less V1's null block): the share of admissions
  that will not fit, ``1 - KV/(B x (P + G))``,
  times the request rate, scaled by the measured ratio where the server preempts now.
- **Output tokens/s** ``= decodes per step / T``; **TPOT p95** moves with the mean step time;
  **ITL p95** with the time of a step that carries the largest prefill chunk
  (``min(budget - decodes, the chunk seen at ITL p95)``); **TTFT** is queue time (the closed
  loop's waiting requests over the request rate) plus prefill time (prompt chunks x step time).
- **Data parallelism** copies the engine: each copy its own KV cache and an even share of the
  offered load; rates (tokens, preemptions) add up over the copies.

Every prediction is the measured value times the model's ratio after/before, so the model's
absolute bias cancels and an unchanged knob predicts exactly what was measured. Unknown inputs
stay unknown (``None``) and lower the confidence; they never become zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.core import names as n
from advisor.core.model import EngineInfo, Histogram
from advisor.derive import steps
from advisor.derive.window import Window
from advisor.predict.graphs import PIECEWISE_PRIOR, Graphs, graphs_of
from advisor.predict.intake import IntakeView, Row, Sums, Tally
from advisor.predict.lengths import lognormal_sigma

KNOBS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_memory_bytes",
    "gpu_memory_utilization",
    "max_num_active_seqs",
    "data_parallel_size",
)
"""The knobs the model can move."""

SIMULATED_ONLY = ("watermark", "long_prefill_token_threshold", "long_prefill_token_threshold_adaptive")
"""Knobs only the scheduler simulator prices (who is admitted when, how a step's budget is
shared): the closed form's steady state does not see them."""

METRICS = (
    "output_tokens_per_second",
    "ttft_seconds_p50",
    "ttft_seconds_p95",
    "tpot_seconds_p95",
    "itl_seconds_p95",
    "preemptions_per_second",
    "running",
)
"""What a prediction states, in this order (the JSON keys of ``predicted`` and ``measured``)."""

MIN_INTERVALS = 3  # busy intervals needed to fit a step time
# steps within this of what a run's step fit gives their work (StepTime.speed_of, relative to the
# run's own) are "the same speed"; four runs of one configuration on three H200 leases agreed
# within 5%, and two recorded after-runs that did not were off by 22% and 32% (docs/prediction.md)
SAME_SPEED = 0.15


class InsufficientData(Exception):
    """The recording cannot carry a prediction (the message names what is missing)."""


# ------------------------------------------------------------------ the fitted step time
@dataclass(frozen=True)
class StepTime:
    """``T = a + k * x + c * p`` seconds; ``x`` is the KV tokens read (``feature == 'kv'``) or
    the decode tokens (``'decode'``) per step; ``p`` the prefill tokens per step."""

    a: float
    k: float
    c: float
    feature: str  # kv | decode | none
    n: int
    r2: float | None
    basis: str = "least squares"  # or "prefill-bound", or "decode as prefill (CPU)"
    # seconds a decode step run piecewise, its batch past the largest full CUDA graph, takes
    # more than ``a + k * x`` (advisor/predict/graphs.py; 0: every decode step alike)
    piecewise_s: float = 0.0

    def at(self, x: float, p: float, piecewise: float = 0.0) -> float:
        """The time of a step that reads ``x`` and prefills ``p`` tokens; ``piecewise``: the
        share of such steps whose decode runs without its full CUDA graph."""
        return self.a + self.k * x + self.c * p + self.piecewise_s * piecewise

    def x_of(self, r: Row, kv_tokens: float | None) -> float:
        """The fit's feature for an interval: the KV tokens read, or the decode tokens."""
        if self.feature == "kv" and kv_tokens is not None and r.kv_usage is not None:
            return r.kv_usage * kv_tokens
        return r.decode

    def speed_of(
        self, rows: Sequence[Row], kv_tokens: float | None, full_limit: int | None = None
    ) -> float | None:
        """How the steps of ``rows`` (another run's busy intervals, or a later part of this one)
        compare with this fit: their measured time over the time it gives their own work (each
        interval's decode or KV tokens read and prefill per step, weighted by its steps, as the
        fit is). 1 where the fit holds; 1.2: they took 20% longer than it says such work takes
        (a server that slowed, or work the fit does not carry to). ``kv_tokens``: that run's KV
        capacity per engine; ``full_limit``: that run's largest decode batch with a full CUDA
        graph (None: every decode step alike). None without steps."""
        measured = modelled = 0.0
        for r in rows:
            if r.steps <= 0:
                continue
            measured += r.dt
            modelled += r.steps * self.at(
                self.x_of(r, kv_tokens), r.prefill, piecewise_share(r.running, full_limit)
            )
        return measured / modelled if modelled > 0 else None


def piecewise_share(batch: float, full_limit: int | None) -> float:
    """The share of the decode steps of a batch of ``batch`` requests on average that run
    piecewise: those past ``full_limit``, the largest decode batch with a full CUDA graph (None:
    none do). A mean within one request of the limit is taken as partly past it."""
    if full_limit is None:
        return 0.0
    return min(1.0, max(0.0, batch - full_limit))


MAX_PIECEWISE = 2.0  # a piecewise decode step is held to at most 3x a full graph's (measured: 1.15-2.1x)


def with_graph_penalty(
    fit: StepTime, rows: Sequence[Row], kv_tokens: float | None, full_limit: int | None
) -> StepTime:
    """The fit with what a decode step run piecewise costs apart (advisor/predict/graphs.py): a
    fixed time a step, what launching the model's pieces from Python adds. Seen in the recording
    where it has busy intervals with their batch past ``full_limit`` and within it (the two
    groups' measured over fitted time a step), each interval of the rarer group weighed as much
    as the typical cost (:data:`PIECEWISE_PRIOR` of the mean decode step) that stands alone where
    the recording has one group only. The fixed part is lowered by that time over the share of
    the recording's steps that ran piecewise, so its steps keep their fitted mean: a recording
    all past the limit keeps its measured steps, and a batch within it is priced as a full
    graph's."""
    if full_limit is None:
        return fit
    groups = {0: [0.0, 0.0, 0], 1: [0.0, 0.0, 0]}  # past the limit -> residual seconds, steps, intervals
    piecewise = steps = decode = 0.0
    for r in rows:
        if r.steps <= 0:
            continue
        share = piecewise_share(r.running, full_limit)
        x = fit.x_of(r, kv_tokens)
        piecewise += share * r.steps
        steps += r.steps
        decode += r.steps * (fit.a + fit.k * x)
        if share in (0.0, 1.0):
            g = groups[int(share)]
            g[0] += r.dt - r.steps * fit.at(x, r.prefill)
            g[1] += r.steps
            g[2] += 1
    if steps <= 0:
        return fit
    typical = PIECEWISE_PRIOR * decode / steps
    extra, how = typical, "typical"
    both = min(groups[0][2], groups[1][2])
    if both >= 1:
        seen = groups[1][0] / groups[1][1] - groups[0][0] / groups[0][1]
        seen = min(max(seen, 0.0), MAX_PIECEWISE * decode / steps)
        extra = (both * seen + typical) / (both + 1)
        how = f"from {both} interval{'s' if both > 1 else ''} of each kind"
    return replace(
        fit,
        a=max(0.0, fit.a - extra * piecewise / steps),  # a fit with no fixed part keeps none
        piecewise_s=extra,
        basis=f"{fit.basis}; decode batches past {full_limit} run piecewise (+{extra * 1e3:.2g} ms a step, {how})",
    )


PREFILL_BOUND_CV = 0.1  # prefill per step varying less than this (coefficient of variation): not fittable


EXACT_MIN_STEPS = 30  # timed steps the plugin's records need before they replace the 2-s deltas


def exact_fit(
    window: Window, seconds: float | None, period: float, decode: float, prefill: float
) -> StepTime | None:
    """The step time from the stat-logger plugin's exact step records, where it runs: the
    per-decode-token and per-prefill-token costs least-squares fitted over every timed step
    (derive/steps.py), the fixed part set so the mean step is the measured step period (the
    engine's own step time leaves out the front end's gap between steps, which throughput pays
    too). None without the plugin or with too few steps."""
    got = steps.fit(steps.step_sums(window, seconds))
    if got is None or got.steps < EXACT_MIN_STEPS:
        return None
    k, c = max(got.per_decode_s, 0.0), max(got.per_prefill_s, 0.0)
    a = max(0.0, period - k * decode - c * prefill)
    return StepTime(
        a, k, c, "decode" if k > 0 else "none", int(got.steps), None, "exact step records (plugin)"
    )


def _prefill_bound(s: Sums) -> bool:
    """Most of every step is prefill and it barely varies between intervals (a budget full in
    each step): the prefill cost cannot be told from the fixed cost by least squares."""
    u, up, upp, ud = s["u"], s["up"], s["upp"], s["ud"]
    if u < MIN_INTERVALS or up <= 0:
        return False
    mean_p = up / u
    var_p = max(0.0, upp / u - mean_p * mean_p)
    return mean_p > ud / u and math.sqrt(var_p) < PREFILL_BOUND_CV * mean_p


def fit_step_time(sums: Sums, rows: int, kv_tokens: float | None) -> StepTime | None:
    """Weighted (by steps) least squares of the step time over the busy intervals, from their
    sums: ``T = a + k * x + c * p``, x the KV tokens the decodes read (KV use x ``kv_tokens``;
    intervals without a KV reading use their decode tokens) or, without ``kv_tokens``, the decode
    tokens per step. None when nothing sensible fits; a negative coefficient is not physical:
    that feature is dropped and the rest refitted."""
    if rows < MIN_INTERVALS:
        return None
    x = _x_sums(sums, kv_tokens)
    w, wt, wp, wpp, wpt = (sums[k] for k in ("w", "wt", "wp", "wpp", "wpt"))
    wx, wxx, wxp, wxt = x["wx"], x["wxx"], x["wxp"], x["wxt"]
    feature = "kv" if kv_tokens is not None else "decode"
    if _prefill_bound(sums):
        # every step carries about as much prefill (the budget is full in each): the fit cannot
        # tell a step's fixed cost from its prefill cost, and a budget change moves exactly that
        # split. A full step's time is its tokens' compute: attributed to them, no fixed part.
        mean_t, mean_p, mean_x = wt / w, wp / w, wx / w
        k = 0.0
        if wxx * w - wx * wx > 1e-12 * max(wxx * w, 1.0):  # x varies: its own cost, through the origin
            sol = _solve([[wxx, wxp], [wxp, wpp]], [wxt, wpt])
            if sol is not None and min(sol) >= 0:
                k = sol[0]
        c = max(0.0, (mean_t - k * mean_x) / mean_p)
        coef = [0.0, k, c]
        return StepTime(0.0, k, c, feature if k > 0 else "none", rows, _r2(sums, x, coef), "prefill-bound")
    full = _solve([[w, wx, wp], [wx, wxx, wxp], [wp, wxp, wpp]], [wt, wxt, wpt])
    if full is not None and min(full) >= 0 and full[1] > 0:
        return StepTime(full[0], full[1], full[2], feature, rows, _r2(sums, x, full))
    part = _solve([[w, wp], [wp, wpp]], [wt, wpt])
    if part is not None and min(part) >= 0:
        coef = [part[0], 0.0, part[1]]
        return StepTime(part[0], 0.0, part[1], "none", rows, _r2(sums, x, coef))
    return None


def _tokens_alike(sums: Sums, fit: StepTime) -> StepTime:
    """A CPU fit that could not price a decode token (the batch did not vary enough): on a CPU
    the engine is compute-bound and a decode token goes through the same layers as a prefill
    token, so every token of a step gets one price, fitted as such over the intervals: ``T = a
    + c * (decodes + prefill)``. Copying the two-term fit's prefill price to the decodes instead
    would keep a price that absorbed what the decodes cost (2-3x the per-token cost of the CPU
    runs whose fits priced both). Where that one-price fit is not physical, the copy stands."""
    w, wt = sums["w"], sums["wt"]
    wu = sums["wd"] + sums["wp"]
    wuu = sums["wdd"] + 2.0 * sums["wdp"] + sums["wpp"]
    wut = sums["wdt"] + sums["wpt"]
    sol = _solve([[w, wu], [wu, wuu]], [wt, wut])
    basis = f"{fit.basis}; decode as prefill (CPU)"
    if sol is None or sol[0] < 0 or sol[1] <= 0:
        return replace(fit, k=fit.c, feature="decode", basis=basis)
    a, c = sol
    return StepTime(a, c, c, "decode", fit.n, _r2(sums, _x_sums(sums, None), [a, c, c]), basis)


def _kv_at_bandwidth(
    fit: StepTime,
    sums: Sums,
    kv_tokens: float | None,
    weights_bytes: float | None,
    kv_token_bytes: float | None,
) -> StepTime:
    """On a GPU, a decode step reads the weights and the KV cache at the memory's bandwidth: the
    fitted mean decode step (the fixed part plus the KV part at the mean KV read x: what the
    intervals determine) is split between the two as their bytes are, ``k = m * kv_token_bytes /
    (weights_bytes + kv_token_bytes * x)``, and the prefill cost is kept.

    The intervals' own slope is not kept even where least squares finds it some standard errors
    from 0: the runs that a recording holds mostly have their batch pinned by the cap or the
    cache, the KV read then varies by 10-25% around its mean with the requests' progress and the
    prefill mix, and the slope over that narrow range is what the other per-step costs that
    vary with it leave. Fitted on the H200 runs of one model and device (8B, 128 KiB a KV
    token), it scattered over 2.4e-8 to 1.3e-7 s a token where the split gives 3.9-4.2e-8 on
    every run; priced by the split, the after-runs at another batch stepped closer to what the
    base run's fit said on 4 of the 5 pairs it changed (docs/prediction.md)."""
    if not fit.basis.startswith("least squares") or not kv_tokens or not weights_bytes or not kv_token_bytes:
        return fit
    x = _x_sums(sums, kv_tokens)
    if sums["w"] <= 0:
        return fit
    mean_x = x["wx"] / sums["w"]
    m = fit.a + fit.k * mean_x
    k = m * kv_token_bytes / (weights_bytes + kv_token_bytes * mean_x)
    a = m - k * mean_x
    if not (k > 0 and a >= 0):
        return fit
    return StepTime(
        a, k, fit.c, "kv", fit.n, _r2(sums, x, [a, k, fit.c]),
        f"{fit.basis}; KV read at the weights' bandwidth",
    )  # fmt: skip


LOW_R2 = 0.5  # a least-squares fit explaining less of the intervals' step times than this is ill-conditioned
ITL_SEEN = 0.5  # share of the chunk steps' ITL samples that must lie above a bound for the bound to pass


def _bounded_by_itl(
    fit: StepTime, itl: Histogram | None, busy: Sums, cfg: Config, prompt_mean: float | None
) -> StepTime:
    """An ill-conditioned least-squares fit's prefill cost, held to what the ITL histogram saw.

    Where every interval carried about the same prefill per step, least squares cannot split a
    step's time between its fixed part and its prefill (R^2 under ``LOW_R2``), and the split
    decides what a step carrying a whole prompt chunk costs. The ITL histogram measures those
    steps: a decode that shares a step with a chunk waits for it, and such steps are a known
    share of all steps, the prefill tokens per step over the chunk (a prompt, or the budget
    beside the decodes). When fewer than ``ITL_SEEN`` of that share lies above a bucket bound,
    the typical chunk step was faster than the bound, and the prefill cost can be at most what
    puts it there; the fixed part takes the rest, so the fitted mean step is kept. Only lowers
    the cost: a tail above the bound can have other causes (preemption, the front end). Called
    only where a queue stood over most of the busy time: the batch is then full in every step,
    so a chunk step carries as many decodes (ITL samples) as any other; below the knee, a burst
    into an idle server is prefilled in steps with few decodes or none, and its ITL tail
    under-counts them."""
    if fit.basis != "least squares" or (fit.r2 is not None and fit.r2 >= LOW_R2) or fit.c <= 0:
        return fit
    steps = busy["steps"]
    if itl is None or itl.count <= 0 or steps <= 0 or not cfg.max_num_batched_tokens or not prompt_mean:
        return fit
    step, prefill = busy["dt"] / steps, busy["prefill_steps"] / steps
    chunk = min(prompt_mean, cfg.max_num_batched_tokens - busy["decode_steps"] / steps)
    if chunk <= prefill:  # a chunk in (nearly) every step: no tail of its own to read
        return fit
    share = prefill / chunk
    for bound, cum in itl.buckets:
        if bound > step and math.isfinite(bound) and 1 - cum / itl.count < ITL_SEEN * share:
            c = (bound - step) / (chunk - prefill)  # a chunk step = the mean step + c (chunk - prefill)
            if c >= fit.c:
                return fit
            return replace(
                fit,
                a=fit.a + (fit.c - c) * prefill,
                c=c,
                basis=f"{fit.basis}; prefill cost bounded by the ITL histogram (chunk steps under {bound:g} s)",
            )
    return fit


def _x_sums(s: Sums, kv_tokens: float | None) -> dict[str, float]:
    """The fit's x terms (weighted ``w*``, unweighted ``u*``): KV use x ``kv_tokens`` where an
    interval had a KV reading, its decode tokens where it had none; without ``kv_tokens`` the
    decode tokens everywhere."""
    out = {}
    for kind in ("w", "u"):
        for suffix, power in (("", 1), ("x", 2), ("p", 1), ("t", 1)):
            key = f"{kind}x{suffix}"
            dec = s[f"{kind}d{'d' if suffix == 'x' else suffix}"]
            if kv_tokens is None:
                out[key] = dec
                continue
            kv = s[f"{kind}k{'k' if suffix == 'x' else suffix}"]
            kv_rows_dec = s[f"kd_{kind}d{'d' if suffix == 'x' else suffix}"]
            out[key] = kv * kv_tokens**power + dec - kv_rows_dec
    return out


def _r2(s: Sums, x: Mapping[str, float], coef: Sequence[float]) -> float | None:
    """R^2 of the fit over the intervals (unweighted), from their sums."""
    u = s["u"]
    if u <= 0:
        return None
    tot = s["utt"] - s["ut"] ** 2 / u
    if tot <= 0:
        return None
    return 1.0 - max(_sse(s, x, coef), 0.0) / tot


def _sse(s: Sums, x: Mapping[str, float], coef: Sequence[float]) -> float:
    """The sum of squared residuals of ``T = a + k x + c p`` over the intervals (unweighted),
    from their sums."""
    a, k, c = coef
    u = s["u"]
    return (
        s["utt"]
        - 2 * (a * s["ut"] + k * x["uxt"] + c * s["upt"])
        + a * a * u
        + k * k * x["uxx"]
        + c * c * s["upp"]
        + 2 * (a * k * x["ux"] + a * c * s["up"] + k * c * x["uxp"])
    )


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Solve a small linear system (the normal equations) by Gaussian elimination."""
    m = len(b)
    a = [row[:] for row in a]
    b = b[:]
    scale = max(abs(a[i][i]) for i in range(m)) or 1.0
    for col in range(m):
        piv = max(range(col, m), key=lambda r: abs(a[r][col]))
        if abs(a[piv][col]) < 1e-12 * scale:
            return None
        a[col], a[piv] = a[piv], a[col]
        b[col], b[piv] = b[piv], b[col]
        for r in range(m):
            if r != col:
                f = a[r][col] / a[col][col]
                a[r] = [u - f * v for u, v in zip(a[r], a[col], strict=True)]
                b[r] -= f * b[col]
    out = [b[i] / a[i][i] for i in range(m)]
    return out if all(math.isfinite(v) for v in out) else None


# ------------------------------------------------------------------ the fitted model
@dataclass(frozen=True)
class Config:
    """The knobs the model reads, per engine (None: unknown)."""

    max_num_seqs: float | None
    max_num_batched_tokens: float | None
    kv_cache_tokens: float | None
    kv_cache_memory_bytes: float | None
    gpu_memory_utilization: float | None
    gpu_memory_bytes: float | None
    gpu_memory_free_bytes: float | None = None
    kv_cache_bytes: float | None = None  # the KV cache's memory on one device, however sized
    block_size: float | None = None  # tokens per KV block (None: unknown, no rounding)
    data_parallel_size: float = 1.0  # engines sharing the load (each with its own KV cache)
    # the scheduler levers the simulator applies (advisor/predict/simulator.py); the closed form
    # below does not price them (predict() refuses them)
    long_prefill_token_threshold: float | None = None  # None/0: no cap on a prefill chunk
    long_prefill_token_threshold_adaptive: bool = False
    watermark: float | None = None  # share of KV blocks an admission leaves free
    max_num_active_seqs: float | None = None  # admission limit into running (None: max_num_seqs)
    # a preempted request finds its full blocks again in the prefix cache (V1's default: on,
    # unless the server says --no-enable-prefix-caching)
    prefix_caching: bool = True
    # each step scheduled while the one before it runs (vLLM 0.14+ on GPUs): an arrival's first
    # step comes one step later
    async_scheduling: bool = False
    # how the engine captures CUDA graphs (advisor/predict/graphs.py; None: every decode step
    # alike: a CPU server, eager mode, a release before full decode graphs)
    graphs: Graphs | None = None

    def full_limit(self) -> int | None:
        """The largest decode batch replayed as a full CUDA graph under these knobs (a larger one
        runs piecewise); None: no such limit."""
        if self.graphs is None:
            return None
        return self.graphs.full_limit(self.max_num_seqs, self.max_num_batched_tokens)

    def usable_kv_tokens(self) -> float | None:
        """The KV tokens requests can hold: vLLM V1's block pool keeps one block as its null block."""
        if self.kv_cache_tokens is None:
            return None
        return max(0.0, self.kv_cache_tokens - (self.block_size or 0.0))

    def footprint(self, prompt: float, output: float) -> float:
        """The KV tokens a request holds at its end, in whole blocks (the last generated token is
        never fed back, so its KV is never written)."""
        tokens = max(prompt + output - 1.0, 1.0)
        if self.block_size:
            return math.ceil(tokens / self.block_size) * self.block_size
        return tokens


@dataclass(frozen=True)
class Model:
    """The engine as measured, and the step time fitted to it."""

    config: Config
    engines: int
    offered: float | None  # requests waiting + running per engine (closed-loop concurrency)
    queued: bool  # a queue stood while it ran
    prompt_mean: float | None
    prompt_p95: float | None
    output_mean: float | None
    output_p95: float | None
    kv_per_running: float | None  # KV tokens a running request holds on average
    running: float  # running requests per engine (busy mean)
    decode: float  # decode tokens per step
    prefill: float  # prefill tokens per step (recompute included)
    step: float  # mean step time, seconds
    requests_per_second: float | None
    preemptions_per_second: float
    measured: dict[str, float | None]
    fit: StepTime | None
    missing: tuple[str, ...] = ()
    binding: str = "unknown"
    itl_chunk: float | None = None  # prefill tokens in a step at ITL p95
    # the spread (lognormal sigma) of the lengths, fitted to the token histograms' buckets
    # (advisor/predict/lengths.py); None: unknown (the simulator falls back on the p95)
    prompt_sigma: float | None = None
    output_sigma: float | None = None
    # mean TTFT the engine does not see (``frontend_seconds_mean``: TTFT less the engine's queue
    # and prefill): the API server's share, which no scheduler knob moves; the simulated TTFT
    # adds it (advisor/predict/simulated.py)
    frontend_seconds: float = 0.0
    gpu: bool = False  # the engine runs on a GPU (its device on record and not "cpu")
    # prefix-cache hits per prompt token queried (vLLM's prefix_cache_hits / _queries over the
    # window; 0: none or unknown), and the tokens of each prompt they amount to, to whole blocks
    # (the signal kv_shared_prefix_tokens; 0 with prefix caching off): the simulator and the KV
    # bounds read them as a prefix every request shares, its blocks held once
    prefix_hit_ratio: float = 0.0
    shared_prefix: float = 0.0
    # the busy rows fitted from, in time order: the load the scheduler simulator replays
    # (advisor/predict/simulated.py); not compared (two models differ by their fit, not their rows)
    rows: tuple[Row, ...] = field(default=(), compare=False, repr=False)
    # every interval's arrivals (busy or not), in time order: the rate and burstiness of open
    # arrivals (advisor/predict/workload.py)
    tallies: tuple[Tally, ...] = field(default=(), compare=False, repr=False)

    def admitted_by_kv(self, usable: float) -> float:
        """Requests whose prompts ``usable`` KV tokens hold at the mean prompt (a prefix the
        requests share held once)."""
        assert self.prompt_mean is not None
        return max(0.0, usable - self.shared_prefix) / max(self.prompt_mean - self.shared_prefix, 1.0)

    def kv_held(self, cfg: Config, batch: float) -> float:
        """KV tokens ``batch`` requests hold at their end at the mean lengths, in ``cfg``'s blocks
        (a prefix the requests share held once)."""
        assert self.prompt_mean is not None and self.output_mean is not None
        return (
            batch * cfg.footprint(self.prompt_mean - self.shared_prefix, self.output_mean)
            + self.shared_prefix
        )

    @property
    def kv_usage_mean(self) -> float | None:
        """The share of the KV cache in use, its mean over the busy intervals that read it."""
        rows = [r for r in self.rows if r.kv_usage is not None]
        busy = sum(r.dt for r in rows)
        return sum(r.kv_usage * r.dt for r in rows if r.kv_usage is not None) / busy if busy > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {
            "binding": self.binding,
            "engines": self.engines,
            "offered_concurrency": self.offered,
            "running": self.running,
            "step_seconds": self.step,
            "decode_tokens_per_step": self.decode,
            "prefill_tokens_per_step": self.prefill,
            "kv_tokens_per_running_request": self.kv_per_running,
            "step_time_fit": None
            if self.fit is None
            else {
                "a_seconds": self.fit.a,
                "per_x_seconds": self.fit.k,
                "x": self.fit.feature,
                "per_prefill_token_seconds": self.fit.c,
                "intervals": self.fit.n,
                "r2": self.fit.r2,
                "basis": self.fit.basis,
            },
            "missing": list(self.missing),
        }


def _num(x: Any) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def build(
    facts: IntakeView,
    window: Window,
    engine: EngineInfo,
    values: Mapping[str, float | None],
    seconds: float | None = None,
    recompute_per_preemption: float = 0.0,
) -> Model:
    """Fit the model to the facts of a span (``facts``, from :mod:`advisor.predict.intake`) and
    the latencies the window's histograms measured over its last ``seconds`` (None: all of it).
    ``recompute_per_preemption``: the tokens a preempted request computes again, which the step
    fit counts as prefill (:meth:`IntakeView.with_recompute`; 0: none counted). Raises
    InsufficientData when it cannot."""
    engines = int(values.get("engines") or 1)
    if facts.busy_rows == 0:
        raise InsufficientData("no interval with requests running and tokens generated")
    queued = facts.queued_rows > 0
    # the steady part of the load: the intervals a queue stood in, when they are most of the busy
    # time (a queue that stood only in the opening wave of a burst is not the steady state)
    held = facts.queued_rows >= MIN_INTERVALS and facts.queued["dt"] >= 0.5 * facts.busy["dt"]
    steady = facts.queued if held else facts.busy
    missing: list[str] = []
    # one engine's KV (the signal's and vLLM's log line's: each data-parallel engine has its own
    # cache); it was divided by the engines once more, so a DP 2 server's own fit simulated half
    # its cache (dense-kv-tp.data-parallel-size-2: 360 preemptions for none, TTFT p95 +211%)
    kv_tokens_e = _num(values.get("kv_cache_tokens"))
    cfg = Config(
        max_num_seqs=_num(values.get("max_num_seqs")),
        max_num_batched_tokens=_num(values.get("max_num_batched_tokens")),
        kv_cache_tokens=kv_tokens_e,
        kv_cache_memory_bytes=_num(engine.get("kv_cache_memory_bytes")),
        gpu_memory_utilization=_num(engine.get("gpu_memory_utilization")),
        gpu_memory_bytes=_num(values.get("gpu_memory_bytes")),
        gpu_memory_free_bytes=_gib(engine.get("gpu_memory_free_gib")),
        kv_cache_bytes=_num(engine.get("kv_cache_memory_bytes"))
        or _gib(engine.get("available_kv_cache_memory_gib")),
        block_size=_num(engine.get("block_size")),
        data_parallel_size=float(engines),
        long_prefill_token_threshold=_num(engine.get("long_prefill_token_threshold")),
        long_prefill_token_threshold_adaptive=engine.get("long_prefill_token_threshold_adaptive") is True,
        watermark=_num(engine.get("watermark")),
        max_num_active_seqs=_num(engine.get("max_num_active_seqs")),
        prefix_caching=engine.get("enable_prefix_caching") is not False,
        async_scheduling=engine.get("async_scheduling") is True,
    )
    cfg = replace(cfg, graphs=graphs_of(engine, cfg.max_num_seqs, cfg.max_num_batched_tokens))
    for name in ("max_num_seqs", "max_num_batched_tokens", "kv_cache_tokens"):
        if getattr(cfg, name) is None:
            missing.append(name)
    dt, steps = steady["dt"], steady["steps"]
    running = steady["dt_running"] / dt
    step = dt / steps
    decode = steady["decode_steps"] / steps
    prefill = steady["prefill_steps"] / steps
    kv_per_running = None
    if kv_tokens_e is not None and steady["kv_dt"] > 0:
        kv_per_running = steady["kv_per_running_dt"] / steady["kv_dt"] * kv_tokens_e
    offered = facts.offered_max if queued else None
    preempt = steady["preemptions"] / dt
    # the step fit's facts: the prefill the counters hide counted (the rest reads them as counted)
    work = facts.with_recompute(recompute_per_preemption)
    fit = exact_fit(window, seconds, step, decode, prefill) or fit_step_time(
        work.busy, work.busy_rows, kv_tokens_e
    )
    if fit is not None and held:
        fit = _bounded_by_itl(
            fit,
            window.histogram_delta(n.ITL, seconds),
            work.busy,
            cfg,
            _num(values.get("prompt_tokens_mean")),
        )
    gpu = str(engine.get("device") or "").lower() not in ("cpu", "")
    if fit is not None and gpu and cfg.kv_cache_bytes and kv_tokens_e:
        weights = _gib(engine.get("model_weights_gib"))
        fit = _kv_at_bandwidth(fit, work.busy, kv_tokens_e, weights, cfg.kv_cache_bytes / kv_tokens_e)
    if fit is None:
        missing.append("a step-time fit (too few busy intervals)")
    elif fit.k == 0 and fit.c > 0 and str(engine.get("device") or "").lower() == "cpu":
        fit = _tokens_alike(work.busy, fit)
    if fit is not None:
        fit = with_graph_penalty(fit, work.rows, kv_tokens_e, cfg.full_limit())

    # measured latencies: the histograms' increase over the window (idle pages add nothing)
    def hq(name: str, q: float) -> float | None:
        return window.quantile(name, q, seconds)

    gen_rate = steady["decode_steps"] / dt * engines
    rps = _num(values.get("requests_per_second"))
    if facts.busy["dt"] > 0:
        rps = facts.busy["finished"] / facts.busy["dt"]
    measured: dict[str, float | None] = {
        "output_tokens_per_second": gen_rate,
        "ttft_seconds_p50": hq(n.TTFT, 0.5),
        "ttft_seconds_p95": hq(n.TTFT, 0.95),
        "tpot_seconds_p95": hq(n.TPOT, 0.95),
        "itl_seconds_p95": hq(n.ITL, 0.95),
        # first scheduled to first token, the engine's mean: what a prompt's chunk steps take
        # (the simulator's prefill cost is set to it: advisor/predict/simulated.py, calibrated)
        "prefill_seconds_mean": _num(values.get("prefill_seconds_mean")),
        "preemptions_per_second": preempt * engines,
        "running": running * engines,
    }
    itl_p50 = hq(n.ITL, 0.5)

    def spread(name: str, mean: float | None) -> float | None:
        h = window.histogram_delta(name, seconds)
        if h is None or mean is None or h.count <= 0:
            return None
        return lognormal_sigma(mean, h.buckets, h.count)

    prompt_mean = _num(values.get("prompt_tokens_mean"))
    output_mean = _num(values.get("generation_tokens_mean"))
    model = Model(
        config=cfg,
        engines=engines,
        offered=offered,
        queued=queued,
        prompt_mean=prompt_mean,
        prompt_p95=_num(values.get("prompt_tokens_p95")),
        output_mean=output_mean,
        output_p95=_num(values.get("generation_tokens_p95")),
        prompt_sigma=spread(n.REQUEST_PROMPT_TOKENS, prompt_mean),
        output_sigma=spread(n.REQUEST_GENERATION_TOKENS, output_mean),
        frontend_seconds=_num(values.get("frontend_seconds_mean")) or 0.0,
        gpu=gpu,
        prefix_hit_ratio=_num(values.get("prefix_cache_hit_ratio")) or 0.0,
        shared_prefix=(_num(values.get("kv_shared_prefix_tokens")) or 0.0) if cfg.prefix_caching else 0.0,
        kv_per_running=kv_per_running,
        running=running,
        decode=decode,
        prefill=prefill,
        step=step,
        requests_per_second=rps,
        preemptions_per_second=preempt,
        measured=measured,
        fit=fit,
        missing=tuple(missing),
        rows=facts.rows,
        tallies=facts.tallies,
    )
    chunk = None
    itl95 = measured["itl_seconds_p95"]
    if fit is not None and fit.c > 0 and itl95 is not None and itl_p50 is not None and itl95 > itl_p50:
        chunk = (itl95 - itl_p50) / fit.c + prefill
    st = state(model, model.config)
    return replace(model, binding=st.binding, itl_chunk=chunk)


# ------------------------------------------------------------------ steady state under a config
@dataclass(frozen=True)
class State:
    batch: float  # running requests per engine
    binding: str  # max_num_seqs | kv_cache | max_num_batched_tokens | load
    step: float  # mean step time, seconds (1.0: no fit, ratios only)
    itl_step: float  # the time of a step with the ITL-p95 prefill chunk
    decode: float  # decode tokens per step
    prefill: float  # prefill tokens per step (recompute included)
    preempt_share: float  # share of admissions preempted
    pressure: float | None  # KV the admitted batch asks for at its end over the cache
    prefill_time: float  # time to prefill a mean prompt: its chunks x the time of a step with one


def state(m: Model, cfg: Config) -> State:
    """The model's steady state under ``cfg`` for the measured load."""
    p_mean, g_mean = m.prompt_mean, m.output_mean
    demand = _demand(m, cfg)
    cap = cfg.max_num_seqs
    limits: list[tuple[float, str]] = [(demand, "load")]
    if cap is not None:
        limits.append((cap, "max_num_seqs"))
    usable = cfg.usable_kv_tokens()
    admit_kv = math.inf  # what the scheduler admits while prompts fit
    if usable is not None and p_mean:
        admit_kv = m.admitted_by_kv(usable)
    admit = min(min(x for x, _ in limits), admit_kv)
    if cfg.kv_cache_tokens is not None and m.kv_per_running:
        limits.append((cfg.kv_cache_tokens / m.kv_per_running, "kv_cache"))
    if cfg.max_num_batched_tokens is not None and p_mean and g_mean:
        per_req = 1.0 + p_mean / max(g_mean, 1.0)
        limits.append((cfg.max_num_batched_tokens / per_req, "max_num_batched_tokens"))
    batch, binding = min(limits, key=lambda x: x[0])
    if binding == "load" and cap is not None and demand >= cap * 0.98:
        binding = "max_num_seqs"
    batch = max(batch, 1.0)
    share, pressure = 0.0, None
    if usable and p_mean is not None and g_mean is not None and math.isfinite(admit):
        # the admitted requests all at their end (they are not: a conservative bound)
        pressure = m.kv_held(cfg, admit) / usable
        share = max(0.0, 1.0 - 1.0 / pressure) if pressure > 0 else 0.0
    scale = batch / max(m.running, 1e-9)
    decode = m.decode * scale
    fresh = m.prefill / (1.0 + _recompute(m, _measured_share(m)))
    prefill = fresh * scale * (1.0 + _recompute(m, share))
    x = 0.0
    if m.fit is not None and m.fit.feature == "kv":
        x = (m.kv_per_running or 0.0) * batch
    elif m.fit is not None and m.fit.feature == "decode":
        x = decode
    room = max(1.0, cfg.max_num_batched_tokens - decode) if cfg.max_num_batched_tokens else None
    if room is not None:
        # no step holds more prefill than the budget leaves beside its decodes: a smaller budget
        # makes the steps that carried more shorter (the rest waits, in TTFT)
        prefill = min(prefill, room)
    chunk = m.itl_chunk if m.itl_chunk is not None else prefill
    if room is not None:
        chunk = min(chunk, room)
    step = m.fit.at(x, prefill, piecewise_share(batch, cfg.full_limit())) if m.fit is not None else 1.0
    itl_step = m.fit.at(x, chunk) if m.fit is not None else 1.0
    prefill_time = 1.0
    if p_mean and m.fit is not None:
        # a prompt in chunks of the budget left beside the decodes: each chunk a step's fixed
        # cost, every prompt token its prefill cost
        chunks = math.ceil(p_mean / room) if room is not None else 1
        prefill_time = chunks * m.fit.at(x, 0.0) + m.fit.c * p_mean
    return State(batch, binding, step, itl_step, decode, prefill, share, pressure, prefill_time)


def _demand(m: Model, cfg: Config) -> float:
    """Requests one engine is offered under ``cfg``: the measured load, split over its engines."""
    demand = m.offered if m.offered is not None else m.running
    return demand * m.config.data_parallel_size / cfg.data_parallel_size


def _measured_share(m: Model) -> float:
    """The preempted share the model expects under the measured config (for the recompute)."""
    usable = m.config.usable_kv_tokens()
    if not usable or m.prompt_mean is None or m.output_mean is None:
        return 0.0
    b = min(m.running, m.admitted_by_kv(usable))
    pressure = m.kv_held(m.config, b) / usable
    return max(0.0, 1.0 - 1.0 / pressure) if pressure > 0 else 0.0


def _recompute(m: Model, share: float) -> float:
    """Extra prefill per fresh prefill token from preemptions (each redoes ~prompt + half the
    output; a prefix the requests share is found in the cache, by both)."""
    if m.prompt_mean is None or m.output_mean is None:
        return 0.0
    own = m.prompt_mean - m.shared_prefix
    if own <= 0:
        return 0.0
    return share * (own + m.output_mean / 2) / own


# ------------------------------------------------------------------ what-if
@dataclass(frozen=True)
class Prediction:
    knob: str
    current: float | None
    value: float
    binding_before: str
    binding_after: str
    predicted: dict[str, float | None]
    measured: dict[str, float | None]
    confidence: float
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "knob": self.knob,
            "current": _whole(self.current),
            "value": _whole(self.value),
            "binding_after": self.binding_after,
            "predicted": {k: self.predicted.get(k) for k in METRICS},
            "measured": {k: self.measured.get(k) for k in METRICS},
            "confidence": round(self.confidence, 2),
        }

    def ratio(self, metric: str) -> float | None:
        a, b = self.predicted.get(metric), self.measured.get(metric)
        if a is None or b is None or b == 0:
            return None
        return a / b


def with_knob(m: Model, knob: str, value: float) -> tuple[Config, float | None]:
    """The config after setting ``knob`` (and the knob's current value). ValueError when the
    model cannot say what the knob does here (the message says what is missing)."""
    c = m.config
    if knob == "max_num_seqs":
        return replace(c, max_num_seqs=value), c.max_num_seqs
    if knob == "max_num_active_seqs":
        # the admission limit into running: the batch's cap as the scheduler applies it (the
        # closed form reads max_num_seqs as that cap; the simulator reads both)
        cur = c.max_num_active_seqs if c.max_num_active_seqs is not None else c.max_num_seqs
        cap = min(value, c.max_num_seqs) if c.max_num_seqs is not None else value
        return replace(c, max_num_seqs=cap, max_num_active_seqs=value), cur
    if knob == "watermark":
        if not 0.0 <= value < 1.0:
            raise ValueError("watermark is in [0, 1)")
        return replace(c, watermark=value), c.watermark if c.watermark is not None else 0.0
    if knob == "long_prefill_token_threshold":
        if value < 0:
            raise ValueError("long_prefill_token_threshold is at least 0")
        cur = c.long_prefill_token_threshold
        return replace(c, long_prefill_token_threshold=value), cur if cur is not None else 0.0
    if knob == "long_prefill_token_threshold_adaptive":
        # a switch: 1 on, 0 off (the cap floored at the budget's fair share, simulator.py)
        if value not in (0.0, 1.0):
            raise ValueError("long_prefill_token_threshold_adaptive is on (1) or off (0)")
        cur = 1.0 if c.long_prefill_token_threshold_adaptive else 0.0
        return replace(c, long_prefill_token_threshold_adaptive=bool(value)), cur
    if knob == "max_num_batched_tokens":
        return replace(c, max_num_batched_tokens=value), c.max_num_batched_tokens
    if knob == "data_parallel_size":
        # the same engine again on other GPUs: each its own KV cache and scheduler, and its
        # share of the load (the load balancing of vLLM's DP coordinator is taken as even)
        if value < 1:
            raise ValueError("data_parallel_size is at least 1")
        return replace(c, data_parallel_size=value), c.data_parallel_size
    if knob == "kv_cache_memory_bytes":
        if c.kv_cache_tokens is None:
            raise ValueError("the KV cache size in tokens is unknown")
        if c.kv_cache_memory_bytes is None:
            raise ValueError("the current kv_cache_memory_bytes is unknown (set neither on the command line)")
        # both per engine: the flag sizes each engine's cache
        per = c.kv_cache_memory_bytes / c.kv_cache_tokens if c.kv_cache_tokens else None
        if not per:
            raise ValueError("the KV bytes per token are unknown")
        tokens = value / per
        return replace(
            c, kv_cache_tokens=tokens, kv_cache_memory_bytes=value, kv_cache_bytes=value
        ), c.kv_cache_memory_bytes
    if knob == "gpu_memory_utilization":
        # vLLM sizes the KV cache as gpu_memory_utilization x the device's memory, less what
        # the weights and activations take: a change of the share moves the KV memory by the
        # change times the device's memory (the rest stays), in the KV bytes per token measured
        if c.kv_cache_memory_bytes is not None:
            raise ValueError(
                "kv_cache_memory_bytes is set: gpu_memory_utilization does not size the KV cache"
            )
        missing = [
            what
            for what, v in (
                ("the current gpu_memory_utilization", c.gpu_memory_utilization),
                ("the device's memory (the host probe or the log's memory line)", c.gpu_memory_bytes),
                ("the KV cache's size in tokens (the log's 'KV cache size' line)", c.kv_cache_tokens),
                ("the KV cache's memory (the log's 'Available KV cache memory' line)", c.kv_cache_bytes),
            )
            if v is None
        ]
        if missing:
            raise ValueError("unknown: " + "; ".join(missing))
        per = _kv_bytes_per_token(m)
        if per is None:
            raise ValueError("the KV bytes per token are unknown")
        assert c.gpu_memory_utilization is not None and c.gpu_memory_bytes is not None
        assert c.kv_cache_tokens is not None and c.kv_cache_bytes is not None
        more_bytes = (value - c.gpu_memory_utilization) * c.gpu_memory_bytes
        if c.kv_cache_bytes + more_bytes <= 0:
            raise ValueError(f"gpu_memory_utilization {value:g} leaves no memory for the KV cache")
        return replace(
            c,
            kv_cache_tokens=max(0.0, c.kv_cache_tokens + more_bytes / per),
            kv_cache_bytes=c.kv_cache_bytes + more_bytes,
            gpu_memory_utilization=value,
        ), c.gpu_memory_utilization
    raise ValueError(f"the model cannot move {knob} (it moves {', '.join(KNOBS + SIMULATED_ONLY)})")


def _kv_bytes_per_token(m: Model) -> float | None:
    """The KV cache's bytes per token on one device (its memory over its tokens)."""
    c = m.config
    if c.kv_cache_bytes and c.kv_cache_tokens:
        return c.kv_cache_bytes / c.kv_cache_tokens
    return None


def predict(m: Model, knob: str, value: float, queue_share: float | None = None) -> Prediction:
    """The steady state after setting ``knob`` to ``value`` under the same load, next to the
    measured one. ``queue_share``: the share of TTFT spent queued (None: from the model)."""
    if knob in SIMULATED_ONLY:
        raise ValueError(f"the closed form cannot price {knob}: only the scheduler simulator does")
    cfg, current = with_knob(m, knob, value)
    s0, s1 = state(m, m.config), state(m, cfg)
    meas = m.measured
    notes: list[str] = []
    thr0, thr1 = s0.decode / s0.step, s1.decode / s1.step
    tr = thr1 / thr0 if thr0 > 0 else 1.0  # per engine
    er = cfg.data_parallel_size / m.config.data_parallel_size  # engines after over before
    out: dict[str, float | None] = {}
    out["output_tokens_per_second"] = _scale(meas["output_tokens_per_second"], tr * er)
    out["running"] = _scale(meas["running"], s1.batch / s0.batch * er)
    out["tpot_seconds_p95"] = _scale(meas["tpot_seconds_p95"], s1.step / s0.step)
    out["itl_seconds_p95"] = _scale(meas["itl_seconds_p95"], s1.itl_step / s0.itl_step)
    # TTFT: queue time (closed loop: the waiting requests over the request rate) + prefill time
    q = queue_share
    if q is None:
        q = 0.9 if m.queued else 0.1
    q = min(max(q, 0.0), 1.0)
    demand, demand1 = _demand(m, m.config), _demand(m, cfg)
    if m.queued and demand > s0.batch:
        qr = (max(demand1 - s1.batch, 0.0) / tr) / (demand - s0.batch)
    else:
        qr = s1.step / s0.step
    pr = s1.prefill_time / s0.prefill_time
    ttft_ratio = q * qr + (1 - q) * pr
    out["ttft_seconds_p50"] = _scale(meas["ttft_seconds_p50"], ttft_ratio)
    out["ttft_seconds_p95"] = _scale(meas["ttft_seconds_p95"], ttft_ratio)
    # preemptions: the share of admissions that will not fit, times the request rate
    pm = meas["preemptions_per_second"]
    rps = (m.requests_per_second or 0.0) * m.engines
    if s1.preempt_share <= 0:
        out["preemptions_per_second"] = 0.0
    elif pm is not None and pm > 0 and s0.preempt_share > 0:
        out["preemptions_per_second"] = pm * (s1.preempt_share / s0.preempt_share) * tr * er
    elif pm is not None and m.requests_per_second is not None:
        # none measured (or none expected now): what the change adds to what was measured
        out["preemptions_per_second"] = max(0.0, pm + (s1.preempt_share * er - s0.preempt_share) * rps * tr)
    else:
        out["preemptions_per_second"] = None
    k0, k1 = m.config.kv_cache_tokens, cfg.kv_cache_tokens
    if k0 is not None and k1 is not None and k1 != k0:
        notes.append(f"the KV cache holds {k0:,.0f} -> {k1:,.0f} tokens per engine")
    if pm and s0.preempt_share <= 0:
        notes.append("the server preempts where the model expects none (prompt length spread)")
    conf = _confidence(m, s0, s1)
    return Prediction(
        knob=knob,
        current=current,
        value=value,
        binding_before=s0.binding,
        binding_after=s1.binding,
        predicted=out,
        measured=dict(meas),
        confidence=conf,
        notes=tuple(notes),
    )


def _scale(x: float | None, r: float) -> float | None:
    return None if x is None else x * r


def _confidence(m: Model, s0: State, s1: State) -> float:
    """How far to trust a prediction: high with a good step-time fit and every input known,
    lower for each unknown input and for a batch far outside what was measured."""
    c = 0.85
    if m.fit is None:
        c -= 0.35
    elif m.fit.r2 is not None and m.fit.r2 < LOW_R2:
        c -= 0.15
    c -= 0.1 * len(m.missing)
    r = s1.batch / s0.batch if s0.batch > 0 else 1.0
    if r > 1.5 or r < 0.67:
        c -= 0.15
    if m.prompt_mean is None or m.output_mean is None:
        c -= 0.2
    return max(0.1, min(c, 0.95))


def _gib(x: Any) -> float | None:
    v = _num(x)
    return None if v is None else v * 2**30


def _whole(x: float | None) -> float | int | None:
    return int(x) if x is not None and float(x).is_integer() else x
