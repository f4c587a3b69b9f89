"""A step-by-step model of vLLM V1's scheduler (as in 0.25-0.33): continuous batching, one
engine step at a time, for the requests a workload sends.

Pure: no I/O, no clock, no randomness of its own (the workload brings its arrivals and lengths).

The rules, as ``vllm/v1/core/sched/scheduler.py`` and ``kv_cache_manager.py`` apply them:

- Each step has a token budget (``max_num_batched_tokens``). The **running** requests are
  scheduled first, in their order: a decode takes one token, a prefill that is still going
  (chunked prefill) takes what is left of its prompt, capped by ``long_prefill_token_threshold``
  (when set, and only while more than one request is running or waiting: a lone request has
  nobody to starve; with ``long_prefill_token_threshold_adaptive`` the cap is floored at the
  budget over the requests running and waiting, as vLLM 0.31+ does) and by what is left of
  the budget.
- Each scheduled request needs its KV in whole blocks of ``block_size``
  (``cdiv(computed + new, block_size)`` blocks held). When the pool lacks a block, the **newest
  running request is preempted** (recompute: its blocks are freed, its progress forgotten, and it
  goes back to the front of the waiting queue); that repeats until the request fits or is itself
  the one preempted. A step that preempted admits nothing new.
- With prefix caching on (``resume_from_cache``; V1's default), a preempted request's full
  blocks stay in the cache, free but evictable: ``KVCacheManager.free`` returns a request's
  blocks in reverse order (its tail first) to the end of the free queue, and new blocks are taken
  from its head. When the request is admitted again, the scheduler looks its tokens up like any
  new request's (``num_computed_tokens`` is 0 after a preemption) and finds the blocks no other
  request has taken since: only the rest is computed again (at least its last token).
- Then the **waiting** requests are admitted first come first served while the running ones are
  fewer than ``max_num_seqs`` (or ``max_num_active_seqs``, 0.31+, when set: vLLM's admission
  limit into RUNNING, ``Scheduler.max_num_active_reqs``; ``max_num_seqs`` then only sizes the
  model runner) and budget is left: each takes its prompt (less the prefix-cache hit, in whole
  blocks: below) up to the budget left; the first one whose blocks do not fit stops the admission.
  The blocks asked are its whole sequence's (prompt, and the outputs a preempted one recomputes),
  not only its first chunk's (``full_sequence_must_fit``: ``scheduler_reserve_full_isl``, on by
  default in 0.25-0.33, ``allocate_slots(full_sequence_must_fit=...)``): a long prompt is not
  admitted to be preempted chunks later.
  With a ``watermark`` (0.24+) a waiting or preempted request is admitted only while the blocks
  it takes leave ``int(watermark x blocks)`` free, when something is already running
  (``KVCacheManager.allocate_slots``: ``required = blocks + watermark_blocks``, applied to
  WAITING/PREEMPTED requests and only with ``has_scheduled_reqs``); running requests grow
  into the reserve.
- **Prefix-cache hits** (``shared_prefix``): a prefix every request shares (a system prompt, a
  template) is computed once and its blocks held once, referenced by every request that finds
  it (vLLM's blocks are reference-counted: ``KVCacheManager.get_computed_blocks`` then
  ``allocate_slots`` take only the blocks past the hit). A request's hit is the prefix's whole
  blocks, at most its tokens less one (``max_cache_hit_length = num_tokens - 1``), looked up again
  when a preempted request is admitted anew (then with its own blocks still cached after it). The
  prefix's blocks stay in the cache (a prefix this hot is never the least recently used).
- After the step, a request whose prompt is fully computed emits a token (its first: TTFT); a
  request that has all its output tokens finishes and frees its blocks.
- With **asynchronous scheduling** (``async_scheduling``; vLLM 0.14+ on GPUs:
  ``EngineCore.step_with_batch_queue`` keeps two steps in flight, ``AsyncScheduler``) each step is
  scheduled when the one before it starts: it admits only what had arrived by then, so an
  arrival's first step is one later than a synchronous engine's; and a request whose last token
  is in flight keeps its place against the cap and its blocks through the next step (vLLM skips
  it there) and is freed after it. A step that would schedule nothing is not taken: the engine
  waits for the one in flight and schedules afresh.
- A request is taken in by the engine between steps: its ``pickup`` is the rest of the step
  that was running when it arrived (vLLM's queued stamp is set then).
- **Step time** is the existing performance model's fitted per-step cost
  (:class:`advisor.predict.perfmodel.StepTime`: ``a + k * x + c * p``, ``x`` the KV tokens the
  decodes read or the decode tokens, ``p`` the prefill tokens of the step); no second cost model.
  A shared prefix's tokens count once in a step's KV read, as the fit reads it (KV use x the
  cache: the blocks held, the prefix's once), and as vLLM's cascade attention (FlashAttention)
  reads a prefix the batch shares: counted once per request, the five recorded runs with a
  shared prefix simulated on their own fits and requests had TPOT p50 and p95 +18% to +83%;
  counted once a step, -13% to +2%.
- **Data parallelism** is copies: the caller splits the load (see :mod:`advisor.predict.workload`).

It returns per-request TTFT, TPOT, ITL and E2E, each request's prefill time as vLLM stamps it
(first scheduled to first token, with the steps in it and their prefill tokens:
``simulated.calibrated`` sets the step's prefill cost to the measured one where the busy
intervals cannot) and the step trace (batch, tokens, KV use, preemptions).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from advisor.predict.perfmodel import StepTime


@dataclass(frozen=True)
class Engine:
    """One engine's scheduling knobs and KV capacity."""

    max_num_seqs: int
    max_num_batched_tokens: int
    kv_blocks: int  # usable blocks (V1's null block already taken out)
    block_size: int = 16
    long_prefill_token_threshold: int = 0  # 0: no cap on one request's prefill chunk
    # tokens of a prefix every request shares, found in the prefix cache (0: none); its blocks
    # are held once, out of ``kv_blocks``
    shared_prefix: int = 0
    watermark: float = 0.0  # share of the blocks an admission must leave free (0: none)
    max_num_active_seqs: int | None = None  # admission limit into running (None: max_num_seqs)
    long_prefill_token_threshold_adaptive: bool = False  # floor the cap at budget / requests
    resume_from_cache: bool = False  # prefix caching on: a preempted request finds its blocks again
    async_scheduling: bool = False  # each step scheduled while the one before it runs (0.14+ on GPUs)
    # the largest decode batch replayed as one full CUDA graph: a decode-only step of more
    # requests runs piecewise, at the fit's piecewise_s (advisor/predict/graphs.py; None: alike)
    full_graph_limit: int | None = None
    # a waiting or preempted request is admitted only while its whole sequence so far (prompt,
    # and outputs to recompute) fits in the free blocks, not only its first chunk (vLLM's
    # ``scheduler_reserve_full_isl``, on by default in 0.25-0.33)
    full_sequence_must_fit: bool = True

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "kv_blocks", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1 (got {getattr(self, name)})")
        if not 0 <= self.shared_blocks < self.kv_blocks:
            raise ValueError(
                f"shared_prefix must be >= 0 and hold fewer blocks than the cache (got {self.shared_prefix})"
            )
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"watermark must be in [0, 1) (got {self.watermark})")
        if self.max_num_active_seqs is not None and not 1 <= self.max_num_active_seqs <= self.max_num_seqs:
            # vLLM refuses to start with it above max_num_seqs (SchedulerConfig.verify_max_model_len)
            raise ValueError(
                f"max_num_active_seqs must be in [1, max_num_seqs] (got {self.max_num_active_seqs})"
            )

    @property
    def admission_limit(self) -> int:
        """The most requests admitted into the running batch."""
        return self.max_num_active_seqs if self.max_num_active_seqs is not None else self.max_num_seqs

    @property
    def shared_blocks(self) -> int:
        """The shared prefix's whole blocks, held once (out of ``kv_blocks``)."""
        return self.shared_prefix // self.block_size

    def hit_blocks(self, prompt: int, tokens: int | None = None) -> int:
        """The shared prefix's blocks a request finds in the cache: the whole blocks of its
        prompt that are the prefix's, at most ``tokens - 1`` tokens' worth of its sequence (the
        prompt, and its outputs after a preemption; one token is always computed)."""
        bs = self.block_size
        return min(self.shared_blocks, prompt // bs, ((prompt if tokens is None else tokens) - 1) // bs)

    @property
    def watermark_blocks(self) -> int:
        """The blocks an admission must leave free (vLLM: ``int(watermark * num_blocks)``)."""
        return int(self.watermark * self.kv_blocks)


@dataclass(frozen=True)
class Request:
    """What one request asks: its prompt and output lengths in tokens, and when it arrives
    (None: a closed-loop client sends it when its previous one finishes)."""

    prompt: int
    output: int
    arrival: float | None = None


@dataclass(slots=True, eq=False)  # eq: by identity (running.remove), and faster
class _Live:
    idx: int
    prompt: int
    output: int
    arrival: float
    computed: int = 0  # tokens whose KV is computed (prompt, then fed-back outputs)
    generated: int = 0
    blocks: int = 0  # its own blocks (the shared prefix's not counted)
    shared: int = 0  # the shared prefix's blocks it references (held once, by the cache)
    first: float | None = None
    last: float | None = None
    itl: list[float] = field(default_factory=list)
    preempted: int = 0
    client: int | None = None
    seen: float = 0.0  # when the engine took it in: the end of the step running when it arrived
    started: float = -1.0  # when it was first scheduled (vLLM's scheduled stamp; -1: not yet)
    pre_tokens: int = 0  # prefill tokens of the steps from then to its first token, all requests'
    pre_steps: int = 0  # those steps
    kept: list[int] | None = None  # after a preemption: its blocks still cached ([count], in the free queue)

    def need(self) -> int:
        """Tokens still to compute before the next output: what is left of the prompt (plus
        the outputs to recompute after a preemption), or one decode token."""
        left = self.prompt + self.generated - self.computed  # _target, inlined (the inner loop)
        return left if left > 1 else 1


@dataclass(frozen=True)
class Done:
    """One finished request's latencies (seconds)."""

    idx: int
    arrival: float
    ttft: float
    e2e: float
    tpot: float | None  # None for a one-token output
    itl: tuple[float, ...]
    preempted: int
    prompt: int
    output: int
    pickup: float = 0.0  # arrival to the engine taking it in (the rest of the step then running)
    # first scheduled to first token (vLLM's request_prefill_time), the steps of that time and
    # their prefill tokens, every request's (what a step's prefill cost moves it by)
    prefill_s: float = 0.0
    prefill_steps: int = 0
    prefill_tokens: int = 0


class Step(NamedTuple):
    """One engine step of the trace (a named tuple: one is made for every simulated step, and a
    frozen dataclass's construction was a tenth of a simulation)."""

    t: float  # when the step ends
    dt: float
    running: int
    waiting: int
    decode: int
    prefill: int
    kv_used: float  # share of the blocks held
    preempted: int


@dataclass(frozen=True)
class Result:
    done: tuple[Done, ...]
    steps: tuple[Step, ...]
    end: float
    truncated: bool  # stopped at max_steps with requests unfinished

    @property
    def preemptions(self) -> int:
        return sum(s.preempted for s in self.steps)

    def output_tokens_per_second(self, warmup: float = 0.0) -> float:
        """Output tokens over the time they took (after ``warmup`` of the run's span)."""
        t0 = self.end * warmup
        toks = sum(d.output for d in self.done if d.arrival >= t0)
        span = self.end - min((d.arrival for d in self.done if d.arrival >= t0), default=0.0)
        return toks / span if span > 0 else 0.0


def _step_cost(fit: StepTime, full_limit: int | None = None) -> Callable[[int, int, int], float]:
    """``fit.at`` of the step's feature, at least a microsecond: the same arithmetic in the same
    order, with the feature chosen once (it is called for every simulated step). A decode-only
    step of more than ``full_limit`` requests runs piecewise (``fit.piecewise_s`` more)."""
    a, k, c = fit.a, fit.k, fit.c
    limit = full_limit if full_limit is not None and fit.piecewise_s > 0 else 1 << 62
    more = fit.piecewise_s

    def by_kv(decodes: int, kv_read: int, prefill: int) -> float:
        v = a + k * float(kv_read) + c * float(prefill)
        v = v + more if decodes > limit and not prefill else v
        return 1e-6 if v < 1e-6 else v  # max(v, 1e-6), NaN passed on as max passes it

    def by_decodes(decodes: int, kv_read: int, prefill: int) -> float:
        v = a + k * float(decodes) + c * float(prefill)
        v = v + more if decodes > limit and not prefill else v
        return 1e-6 if v < 1e-6 else v

    def by_prefill(decodes: int, kv_read: int, prefill: int) -> float:
        v = a + k * 0.0 + c * float(prefill)
        v = v + more if decodes > limit and not prefill else v
        return 1e-6 if v < 1e-6 else v

    return by_kv if fit.feature == "kv" else by_decodes if fit.feature == "decode" else by_prefill


def simulate(
    engine: Engine,
    fit: StepTime,
    requests: Sequence[Request],
    clients: int | None = None,
    max_steps: int = 200_000,
    fast_forward: bool = True,
) -> Result:
    """Run ``requests`` through one engine. With ``clients`` (a closed loop), that many clients
    each send the next request of the list as soon as their previous one finishes (arrival times
    are ignored); otherwise each request arrives at its ``arrival``. Stops after ``max_steps``
    steps (``truncated`` says so).

    ``fast_forward``: where every running request decodes and nothing can happen but decodes
    (no request finishes, none arrives, none can be admitted, no block is missing), those steps
    are taken at once (:func:`_decode_run`): the same steps, times, trace and latencies, to the
    bit, as one at a time (``False``, the reference the tests hold it to), at a cost per step
    that does not grow with the batch. 94% of the steps of the recorded runs' replays are such
    decodes, in runs of ~10."""
    if clients is not None and clients < 1:
        raise ValueError("a closed loop needs at least one client")
    if clients is None and any(r.arrival is None for r in requests):
        raise ValueError("open arrivals need every request's arrival time")
    cost = _step_cost(fit, engine.full_graph_limit)
    bs = engine.block_size
    pending = deque(sorted(range(len(requests)), key=lambda i: requests[i].arrival or 0.0))
    waiting: deque[_Live] = deque()
    running: list[_Live] = []
    hb = engine.shared_blocks  # the shared prefix's blocks, held once
    prefix = hb * bs  # its tokens, read once a step that decodes (the step time's KV read)
    free = engine.kv_blocks - hb
    done: list[Done] = []
    trace: list[Step] = []
    t = 0.0
    nxt = 0  # next request index for the closed loop

    def arrive(idx: int, at: float, client: int | None) -> None:
        r = requests[idx]
        if r.prompt < 1 or r.output < 1:
            raise ValueError(f"request {idx}: prompt and output need at least one token")
        waiting.append(_Live(idx, r.prompt, r.output, at, client=client, seen=max(at, t)))

    if clients is not None:
        for c in range(min(clients, len(requests))):
            arrive(c, 0.0, c)
        nxt = min(clients, len(requests))

    # the free blocks in the order vLLM's prefix cache evicts them (only with resume_from_cache):
    # segments of counts, the head evicted first; a preempted request's full blocks are its own
    # segment (``_Live.kept``), behind its partial last block (freed in reverse: the tail first)
    lru: deque[list[int]] = deque([[free]]) if engine.resume_from_cache else deque()

    def evict(n: int) -> None:
        while n > 0:
            seg = lru[0]
            took = min(n, seg[0])
            seg[0] -= took
            n -= took
            if not seg[0]:
                lru.popleft()

    def release(r: _Live, preempted: bool = False) -> None:
        nonlocal free
        free += r.blocks
        if engine.resume_from_cache and r.blocks:
            full = max(0, min(r.computed // bs - r.shared, r.blocks)) if preempted else 0
            if r.blocks - full:
                lru.append([r.blocks - full])
            if full:
                r.kept = [full]
                lru.append(r.kept)
        r.blocks = 0
        r.shared = 0

    def grow(r: _Live, new: int, keep: int = 0) -> bool:
        nonlocal free
        want = math.ceil((r.computed + new) / bs) - r.shared - r.blocks
        if want + keep <= free:
            free -= max(want, 0)
            r.blocks += max(want, 0)
            if engine.resume_from_cache and want > 0:
                own = 0
                if r.kept is not None:  # a resumed request takes its cached blocks back
                    own, r.kept[0], r.kept = r.kept[0], 0, None
                evict(want - own)
            return True
        return False

    # asynchronous scheduling: the step starting now was scheduled when the one before it started
    # (``sched_at``), so it admits only what had arrived by then, and a request that finished in
    # the last step still holds its place and its blocks in it (``leaving``): vLLM skips it, as
    # its last token is in flight, and frees it when that token comes back
    sched_at = 0.0
    leaving: list[_Live] = []
    # the last step scheduled every running request, preempted none, and each of them came out
    # of it decoding (a token emitted: its prompt computed): the next step is a decode of them all
    settled = False
    it = 0
    while it < max_steps:
        it += 1
        if clients is None:
            while pending and (requests[pending[0]].arrival or 0.0) <= t:
                i = pending.popleft()
                arrive(i, requests[i].arrival or 0.0, None)
        if not running and not waiting and not leaving:
            if clients is None and pending:
                t = sched_at = requests[pending[0]].arrival or 0.0
                continue
            break
        if not engine.async_scheduling:
            sched_at = t
        if settled and fast_forward and not leaving:
            nxt_arrival = (requests[pending[0]].arrival or 0.0) if clients is None and pending else math.inf
            before = free
            k, t, free = _decode_run(
                engine, running, waiting, free, t, nxt_arrival, max_steps - it + 1, cost, trace, lru
            )
            if engine.resume_from_cache:
                evict(before - free)
            if k:
                it += k - 1
                sched_at = t - trace[-1].dt
                settled = False  # it stopped before an event: the next step is one at a time
                continue
        budget = engine.max_num_batched_tokens
        sched: list[tuple[_Live, int]] = []
        preempted = 0
        # the step's work: the running decodes whose block is held counted as they are scheduled
        # (the inner loop), the others (chunks, decodes that took a block, admissions) after
        decodes = prefill = kv_read = 0
        prefilling: list[_Live] = []
        others: list[tuple[_Live, int]] = []
        # the long-prefill cap of this step: none for a lone request; adaptive: at least a fair
        # share of the budget (vLLM 0.31+, Scheduler.schedule)
        eligible = len(running) + len(waiting)
        cap = engine.long_prefill_token_threshold if eligible > 1 else 0
        if cap > 0 and engine.long_prefill_token_threshold_adaptive:
            cap = max(cap, engine.max_num_batched_tokens // eligible)
        # 1. running requests, in order
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            if (
                r.generated
                and r.prompt + r.generated - r.computed <= 1
                and r.computed < (r.blocks + r.shared) * bs
            ):
                # performance only: a decode whose next token's block is held needs nothing else
                sched.append((r, 1))
                budget -= 1
                decodes += 1
                kv_read += r.computed - r.shared * bs  # its own tokens: the prefix is added once
                i += 1
                continue
            new = r.need()
            if cap > 0:
                new = min(new, cap)
            new = min(new, budget)
            while not grow(r, new):
                victim = running.pop()  # the newest running request
                release(victim, preempted=True)
                victim.computed, victim.preempted = 0, victim.preempted + 1
                waiting.appendleft(victim)
                preempted += 1
                if victim is r:
                    break
            else:
                sched.append((r, new))
                others.append((r, new))
                budget -= new
                i += 1
                continue
            break
        # 2. waiting requests, first come first served (none after a preemption)
        if not preempted:
            while waiting and budget > 0 and len(running) + len(leaving) < engine.admission_limit:
                r = waiting[0]
                if r.arrival > sched_at:
                    break  # it came after this step was scheduled
                if r.computed == 0 and hb:  # looked up in the cache: the shared prefix is a hit
                    r.shared = engine.hit_blocks(r.prompt, r.prompt + r.generated)
                    r.computed = r.shared * bs
                if r.kept is not None:  # resumed: what is left of its blocks is a hit too
                    r.computed = min((r.shared + r.kept[0]) * bs, r.prompt + r.generated - 1)
                new = r.need()
                if cap > 0:
                    new = min(new, cap)
                new = min(new, budget)
                keep = engine.watermark_blocks if running else 0
                if engine.full_sequence_must_fit and (
                    math.ceil((r.prompt + r.generated) / bs) - r.shared - r.blocks + keep > free
                ):
                    break  # its whole sequence does not fit: it waits (nothing is preempted for it)
                if not grow(r, new, keep):
                    break
                waiting.popleft()
                running.append(r)
                sched.append((r, new))
                others.append((r, new))
                budget -= new
                if r.started < 0:
                    r.started = sched_at
                    if sched_at < t and trace:  # scheduled while the step before ran: it waits it out
                        r.pre_tokens += trace[-1].prefill
                        r.pre_steps += 1
        if not sched and (leaving or (waiting and waiting[0].arrival > sched_at)):
            # an empty step (asynchronous scheduling only): the engine waits for the step in
            # flight, takes its outputs in and schedules afresh, now
            for r in leaving:
                release(r)
            leaving.clear()
            sched_at, settled = t, False
            continue
        if not sched:
            # nothing fits even alone (a prompt larger than the cache): refuse it, as vLLM does
            r = waiting.popleft()
            raise ValueError(f"request {r.idx} needs more KV blocks than the cache has ({engine.kv_blocks})")
        for r, new in others:
            if r.generated and new == 1:
                decodes += 1
                kv_read += r.computed - r.shared * bs  # its own tokens: the prefix is added once
            else:
                prefill += new
                prefilling.append(r)
        settled = not preempted and len(sched) == len(running)
        dt = cost(decodes, kv_read + (prefix if decodes else 0), prefill)
        for r in prefilling:
            if r.first is None:
                r.pre_tokens += prefill
                r.pre_steps += 1
        sched_at = t  # when the next step is scheduled, with asynchronous scheduling
        t += dt
        for r in leaving:  # their last token is back: the next step can have their place
            release(r)
        leaving.clear()
        finished: list[_Live] = []
        for r, new in sched:
            r.computed += new
            if r.computed < r.prompt + r.generated:  # _target(r), inlined: a chunk of its prompt
                settled = False
            else:
                r.generated += 1
                if r.first is None:
                    r.first = t
                elif r.last is not None:
                    r.itl.append(t - r.last)
                r.last = t
                if r.generated >= r.output:
                    finished.append(r)
        for r in finished:
            running.remove(r)
            if engine.async_scheduling:
                leaving.append(r)
            else:
                release(r)
            assert r.first is not None
            tpot = (t - r.first) / (r.output - 1) if r.output > 1 else None
            done.append(
                Done(
                    r.idx,
                    r.arrival,
                    r.first - r.arrival,
                    t - r.arrival,
                    tpot,
                    tuple(r.itl),
                    r.preempted,
                    r.prompt,
                    r.output,
                    r.seen - r.arrival,
                    r.first - r.started,
                    r.pre_steps,
                    r.pre_tokens,
                )
            )
            if clients is not None and nxt < len(requests):
                arrive(nxt, t, r.client)
                nxt += 1
        used = 1.0 - free / engine.kv_blocks
        trace.append(Step(t, dt, len(running), len(waiting), decodes, prefill, used, preempted))
    else:
        return Result(tuple(done), tuple(trace), t, True)
    return Result(tuple(done), tuple(trace), t, False)


def _decode_run(
    engine: Engine,
    running: list[_Live],
    waiting: deque[_Live],
    free: int,
    t: float,
    next_arrival: float,
    most: int,
    cost: Callable[[int, int, int], float],
    trace: list[Step],
    lru: deque[list[int]] | None = None,
) -> tuple[int, float, int]:
    """The steps from ``t`` in which every running request decodes and nothing else happens, taken
    at once: none finishes, no arrival comes (``next_arrival``, the next open arrival), the head of
    the queue cannot be admitted (the cap, the budget or its blocks: what it lacks stays lacking,
    as the decodes only take blocks) and no decode misses a block (no preemption). At most
    ``most`` steps. Each step is costed and traced as :func:`simulate` would, with the same
    arithmetic in the same order. Returns (steps taken, the time and the free blocks after them);
    (0, t, free) where the next step is not such a step. The caller knows that the last step
    scheduled every running request, preempted none, and that each of them came out of it with
    a token (its prompt computed: a decode next), and that none is leaving."""
    n = len(running)
    budget = engine.max_num_batched_tokens - n
    if not n or budget < 0 or t >= next_arrival:
        return 0, t, free
    most = min(most, min(r.output - r.generated for r in running) - 1)  # the first finish
    if most < 1:
        return 0, t, free
    bs = engine.block_size
    head_blocks = -1  # blocks the head of the queue needs to be admitted (-1: no admission tried)
    evictable = math.inf  # blocks the run may take before the head's hit changes
    if waiting and budget > 0 and n < engine.admission_limit:
        r = waiting[0]
        computed, shared = r.computed, r.shared
        if computed == 0 and engine.shared_blocks:
            shared = engine.hit_blocks(r.prompt, r.prompt + r.generated)
            computed = shared * bs
        if r.kept is not None:
            computed = min((shared + r.kept[0]) * bs, r.prompt + r.generated - 1)
        if r.kept is not None and not engine.full_sequence_must_fit:
            # the decodes' new blocks evict from the head of the free queue: stop before they
            # reach the head's cached blocks (its hit, and with it the blocks its first chunk
            # asks, would change). Where its whole sequence must fit, what it asks does not
            # depend on its hit: the eviction moves only what it computes again once admitted,
            # and the caller's ``evict`` after the run takes the same blocks as step by step
            ahead = 0
            for seg in lru or ():
                if seg is r.kept:
                    break
                ahead += seg[0]
            evictable = ahead
        left = r.prompt + r.generated - computed
        new = left if left > 1 else 1
        eligible = n + len(waiting)
        cap = engine.long_prefill_token_threshold if eligible > 1 else 0
        if cap > 0 and engine.long_prefill_token_threshold_adaptive:
            cap = max(cap, engine.max_num_batched_tokens // eligible)
        if cap > 0:
            new = min(new, cap)
        new = min(new, budget)
        need = r.prompt + r.generated if engine.full_sequence_must_fit else computed + new
        head_blocks = math.ceil(need / bs) - shared - r.blocks + engine.watermark_blocks
    # a decode takes a new block in the step that starts with its computed tokens a whole number
    # of blocks: the requests by computed tokens modulo the block size say how many in each step
    phase = [0] * bs
    kv_read = 0
    prefix = engine.shared_blocks * bs  # read once a step, as :func:`simulate` counts it
    for r in running:
        phase[r.computed % bs] += 1
        kv_read += r.computed - r.shared * bs  # its own tokens: the prefix is added once
    times: list[float] = []
    left_blocks = free
    k = 0
    while k < most and t < next_arrival:
        take = phase[-k % bs]
        if take > left_blocks:
            break  # a decode would miss its block: preemption, one step at a time
        if 0 <= head_blocks <= left_blocks - take:
            break  # the head of the queue would be admitted
        if free - left_blocks + take > evictable:
            break  # it would evict the head's cached blocks
        left_blocks -= take
        dt = cost(n, kv_read + prefix, 0)
        t += dt
        times.append(t)
        trace.append(Step(t, dt, n, len(waiting), n, 0, 1.0 - left_blocks / engine.kv_blocks, 0))
        kv_read += n
        k += 1
    if k:
        gaps = [b - a for a, b in itertools.pairwise(times)]
        for r in running:
            r.computed += k
            r.generated += k
            r.blocks = -(-r.computed // bs) - r.shared
            assert r.last is not None
            r.itl.append(times[0] - r.last)
            r.itl.extend(gaps)
            r.last = t
    return k, t, left_blocks


def _target(r: _Live) -> int:
    """Tokens computed when the next output token comes out: the prompt for the first, then
    each output fed back (after a preemption, all of them again)."""
    return r.prompt + r.generated
