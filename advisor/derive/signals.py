"""The signal catalog: the only vocabulary rules may use.

Each signal has a name, a unit, a help line, one Python function over the window
(and the engine's knobs), and its PromQL twin over raw vLLM series, so dashboards,
recording rules and fleet mode compute the same thing from Prometheus. ``{w}`` in a
PromQL twin is the range (``5m``); twins that need the engine's knobs read the
advisor's own ``vllm_advisor_engine_knob`` series.

Missing data is ``None`` ("unknown"), never zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from advisor.core import names as n
from advisor.core.model import EngineInfo
from advisor.derive import sketches, trust
from advisor.derive.window import Window

Value = float | None


@dataclass
class Context:
    """What a signal function may look at."""

    window: Window
    engine: EngineInfo = field(default_factory=EngineInfo)
    seconds: float | None = None  # the evaluation window; None = everything in the window
    targets: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Signal:
    name: str
    unit: str  # seconds | ratio | requests | tokens | per_second | tokens_per_second | count | cores | bytes | info
    help: str
    fn: Callable[[Context, Values], Value]
    promql: str | None
    per: str = "server"  # server | config (a knob or fact echoed from the engine)

    @property
    def series(self) -> str:
        return n.output_name(self.name)


class Values:
    """Lazy, memoised signal values for one evaluation (signals may use each other)."""

    def __init__(self, ctx: Context, catalog: dict[str, Signal] | None = None) -> None:
        self.ctx = ctx
        self.catalog = catalog or CATALOG
        self._memo: dict[str, Value] = {}
        self._busy: set[str] = set()
        self.sources: dict[str, str] = {}
        """Where a latency quantile came from (``sketches.SOURCE_PLUGIN`` or
        ``SOURCE_HISTOGRAM``), for the signals computed so far that have a choice."""

    def source(self, name: str) -> str | None:
        """Where signal ``name``'s value came from, when it has a choice of sources (the latency
        quantiles: the plugin's sketch or vLLM's histogram); None for the others."""
        self[name]
        return self.sources.get(name)

    def __getitem__(self, name: str) -> Value:
        if name in self._memo:
            return self._memo[name]
        sig = self.catalog.get(name)
        if sig is None:
            raise KeyError(f"unknown signal {name!r}")
        if name in self._busy:
            raise RuntimeError(f"signal {name} depends on itself")
        self._busy.add(name)
        try:
            v = sig.fn(self.ctx, self)
        finally:
            self._busy.discard(name)
        if v is not None and (math.isnan(v) or math.isinf(v)):
            v = None
        self._memo[name] = v
        return v

    def all(self) -> dict[str, Value]:
        return {name: self[name] for name in self.catalog}


def compute(ctx: Context) -> dict[str, Value]:
    return Values(ctx).all()


# ------------------------------------------------------------------ helpers
def _div(a: Value, b: Value) -> Value:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _rate(name: str, match: dict[str, str] | None = None) -> Callable[[Context, Values], Value]:
    return lambda c, v: c.window.rate(name, c.seconds, match)


def _delta(name: str) -> Callable[[Context, Values], Value]:
    return lambda c, v: c.window.counter_delta(name, c.seconds)


def _gauge(name: str, how: str, agg: str = "total", **match: str) -> Callable[[Context, Values], Value]:
    def fn(c: Context, v: Values) -> Value:
        if how == "avg":
            return c.window.gauge_avg(name, c.seconds, agg, **match)
        return c.window.gauge_max(name, c.seconds, agg, **match)

    return fn


def _quantile(name: str, q: float) -> Callable[[Context, Values], Value]:
    return lambda c, v: c.window.quantile(name, q, c.seconds)


HISTOGRAM_NOTE = "(from histogram buckets)"
PLUGIN_NOTE = "(the stat-logger plugin's sketch: per request, within its 1% accuracy)"


def plugin_latency(c: Context, quantity: str) -> sketches.SketchLatency | None:
    """The plugin's estimate of ``quantity`` over all requests in the evaluation window (memoised
    in the window for the cycle), None without the plugin."""
    key = ("plugin-latency", quantity, c.seconds)
    out = c.window.memo(key, lambda: sketches.latency(c.window, quantity, c.seconds))
    return out if isinstance(out, sketches.SketchLatency) else None


def _latency_quantile(
    signal: str, metric: str, quantity: str | None, q: float
) -> Callable[[Context, Values], Value]:
    """A latency quantile from the plugin's sketch when the page carries it (and it has the
    quantile), else from vLLM's histogram buckets; ``Values.sources`` records which."""

    def fn(c: Context, v: Values) -> Value:
        if quantity is not None:
            est = plugin_latency(c, quantity)
            x = est.quantile(q) if est is not None else None
            if x is not None:
                v.sources[signal] = sketches.SOURCE_PLUGIN
                return x
        v.sources[signal] = sketches.SOURCE_HISTOGRAM
        return c.window.quantile(metric, q, c.seconds)

    return fn


def latency_sources(c: Context) -> dict[str, str]:
    """Per latency (``ttft_seconds``, ...), where its quantiles come from now."""
    out = {}
    for base, _metric, _what, _raw in _LATENCIES:
        qty = PLUGIN_QUANTITY.get(base)
        est = plugin_latency(c, qty) if qty is not None else None
        out[base] = sketches.SOURCE_PLUGIN if est is not None and est.batches else sketches.SOURCE_HISTOGRAM
    # the short prompts' TTFT: the plugin's shortest bucket, else estimated from the histogram
    short = Values(c)
    short["ttft_short_prompts_seconds_p95"]
    out["ttft_short_prompts_seconds"] = short.sources.get(
        "ttft_short_prompts_seconds_p95", sketches.SOURCE_HISTOGRAM
    )
    return out


def help_for(name: str, source: str | None) -> str:
    """A signal's help line, saying where its value came from when that was the plugin."""
    h = CATALOG[name].help if name in CATALOG else ""
    if source is not None and source in SOURCE_HELP.get(name, {}):
        return SOURCE_HELP[name][source]
    if source == sketches.SOURCE_PLUGIN:
        return h.replace(HISTOGRAM_NOTE, PLUGIN_NOTE)
    return h


def _hmean(name: str) -> Callable[[Context, Values], Value]:
    def fn(c: Context, v: Values) -> Value:
        h = c.window.histogram_delta(name, c.seconds)
        return h.mean() if h is not None else None

    return fn


def _hcount(name: str) -> Callable[[Context, Values], Value]:
    def fn(c: Context, v: Values) -> Value:
        h = c.window.histogram_delta(name, c.seconds)
        return h.count if h is not None else None

    return fn


def _knob(name: str) -> Callable[[Context, Values], Value]:
    def fn(c: Context, v: Values) -> Value:
        x = c.engine.get(name)
        if isinstance(x, bool):
            return 1.0 if x else 0.0
        try:
            return float(x) if x is not None else None
        except (TypeError, ValueError):
            return None

    return fn


def _stalled_seconds(c: Context, v: Values) -> Value:
    if trust.sleeping(c.window) is not None:
        return 0.0  # a sleeping engine counts no tokens by design: not a stall
    s = trust.stall(c.window, c.seconds)
    return s.seconds if s is not None else None


def _engines(c: Context, v: Values) -> Value:
    latest = c.window.latest
    if latest is None:
        return None
    return float(max(1, len(latest.label_values(n.ENGINE_LABEL))))


def _running_per_engine_max(c: Context, v: Values) -> Value:
    return c.window.gauge_max(n.NUM_RUNNING, c.seconds, agg="max")


def _kv_tokens(c: Context, v: Values) -> Value:
    x = c.engine.get("kv_cache_tokens")
    if x is None:
        latest = c.window.latest
        info = latest.info_labels(n.CACHE_CONFIG_INFO) if latest else []
        for labels in info:
            try:
                got = float(labels["kv_cache_size_tokens"])
            except (KeyError, ValueError):
                continue
            if math.isfinite(got) and 0 < got <= 1e18:  # "N/A", 1e308, -1: not a reading
                return got
        return None
    return float(x)


def _block_size(c: Context) -> int:
    b = c.engine.get("block_size")
    try:
        return int(b) if b else 16
    except (TypeError, ValueError):
        return 16


def _kv_tokens_per_request(c: Context, v: Values) -> Value:
    p, g = v["prompt_tokens_mean"], v["generation_tokens_mean"]
    if p is None or g is None:
        return None
    bs = _block_size(c)
    # the last generated token is never fed back, so its KV is never written
    return float(math.ceil((p + g - 1) / bs) * bs)


def _num_or_none(x: object) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    try:
        return float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _weights_to_kv(c: Context, v: Values) -> Value:
    # only where vLLM sized the KV cache from gpu_memory_utilization (the memory less the
    # weights): a KV size fixed in bytes stays that size per GPU under either parallelism
    if c.engine.get("kv_cache_memory_bytes") or c.engine.get("num_gpu_blocks_override"):
        return None
    weights = _num_or_none(c.engine.get("model_weights_gib"))
    kv = _num_or_none(c.engine.get("available_kv_cache_memory_gib"))
    if weights is None or not kv or kv <= 0:
        return None
    return weights / kv


def _admission_tokens_share(c: Context, v: Values) -> Value:
    total = c.window.counter_delta(n.ADMISSION_REJECTIONS, c.seconds)
    if total is None or total <= 0:
        return None
    by_tokens = c.window.counter_delta(
        n.ADMISSION_REJECTIONS, c.seconds, {n.ADMISSION_REASON_LABEL: n.ADMISSION_BY_TOKENS}
    )
    return (by_tokens or 0.0) / total


def _admission_ratio(c: Context, v: Values) -> Value:
    rejected, served = v["admission_rejections_per_second"], v["requests_per_second"]
    if rejected is None or served is None:
        return None
    return _div(rejected, rejected + served) if rejected + served > 0 else 0.0


def _spec_log(c: Context) -> tuple[float, float, int] | None:
    """Accepted and drafted tokens summed over the window's ``SpecDecoding metrics:`` log lines
    (each line counts the tokens since the previous one), and how many lines; None without any."""
    acc = drafted = 0.0
    lines = 0
    for e in c.window.events("engine_stats", c.seconds):
        f = e.fields or {}
        if f.get("format") != "spec_decode":
            continue
        a, d = _num_or_none(f.get("accepted_tokens")), _num_or_none(f.get("drafted_tokens"))
        if a is None or d is None:
            continue
        acc, drafted, lines = acc + a, drafted + d, lines + 1
    return (acc, drafted, lines) if lines else None


def _spec_acceptance(c: Context, v: Values) -> Value:
    acc = c.window.counter_delta(n.SPEC_DECODE_ACCEPTED_TOKENS, c.seconds)
    drafted = c.window.counter_delta(n.SPEC_DECODE_DRAFT_TOKENS, c.seconds)
    if acc is not None and drafted:
        return acc / drafted
    got = _spec_log(c)  # no /metrics series (or no draft in the window): the log line says it
    if got is not None and got[1] > 0:
        return got[0] / got[1]
    return None


def _spec_mean_length(c: Context, v: Values) -> Value:
    acc = c.window.counter_delta(n.SPEC_DECODE_ACCEPTED_TOKENS, c.seconds)
    drafts = c.window.counter_delta(n.SPEC_DECODE_DRAFTS, c.seconds)
    if acc is not None and drafts:
        return 1.0 + acc / drafts  # vLLM's convention: the bonus token counted
    lengths = [
        _num_or_none((e.fields or {}).get("mean_acceptance_length"))
        for e in c.window.events("engine_stats", c.seconds)
        if (e.fields or {}).get("format") == "spec_decode"
    ]
    known = [x for x in lengths if x is not None]
    return sum(known) / len(known) if known else None


def _spec_tokens(c: Context, v: Values) -> Value:
    """Draft tokens per draft: the num_speculative_tokens the engine runs with (its knob where
    known, else measured from the counters)."""
    k = _num_or_none(c.engine.get("num_speculative_tokens"))
    if k is not None:
        return k
    drafted = c.window.counter_delta(n.SPEC_DECODE_DRAFT_TOKENS, c.seconds)
    drafts = c.window.counter_delta(n.SPEC_DECODE_DRAFTS, c.seconds)
    return _div(drafted, drafts)


def _sleeping(c: Context, v: Values) -> Value:
    """1 when an engine of the latest page is asleep (vllm:engine_sleep_state{sleep_state="awake"}
    is 0); 0 when every engine is awake; None without the series (before 0.29)."""
    latest = c.window.latest
    if latest is None:
        return None
    awake = latest.values(n.ENGINE_SLEEP_STATE, {n.SLEEP_STATE_LABEL: "awake"})
    if not awake:
        return None
    return 1.0 if min(awake) < 0.5 else 0.0


def _capture_size(c: Context, v: Values) -> Value:
    """The largest CUDA-graph capture size the engine resolved (its start-up log, or the command
    line); 0 when it runs eagerly. Not guessed from vLLM's default min(2 x max_num_seqs, 512):
    the platform and the compilation mode change it, and an advice needs the real value."""
    x = _num_or_none(c.engine.get("max_cudagraph_capture_size"))
    if x is not None:
        return x
    return 0.0 if c.engine.get("enforce_eager") is True else None


def _device_is_gpu(c: Context, v: Values) -> Value:
    d = c.engine.get("device") or c.engine.get("device_type")
    if d is None or str(d).strip() in ("", "?"):
        return None
    return 0.0 if str(d).strip().lower() == "cpu" else 1.0


def _kv_fp8(c: Context, v: Values) -> Value:
    d = c.engine.get("kv_cache_dtype")
    if d is None or str(d) in ("", "None"):
        return None
    return 1.0 if str(d).lower().startswith("fp8") else 0.0


def _kv_shared_prefix(c: Context, v: Values) -> Value:
    """The prefix-cache hits per prompt (hits per token queried times the mean prompt), to the
    nearest whole block (vLLM hits whole blocks; the mean falls short of the prefix where the
    window's first requests came before it was cached), half a block up as PromQL's round(); 0
    where nothing was found or the counters are absent."""
    p = v["prompt_tokens_mean"]
    if p is None:
        return None
    bs = _block_size(c)
    return float(math.floor((v["prefix_cache_hit_ratio"] or 0.0) * p / bs + 0.5) * bs)


def _kv_sustained(c: Context, v: Values) -> Value:
    t, per, shared = v["kv_cache_tokens"], v["kv_tokens_per_request"], v["kv_shared_prefix_tokens"] or 0.0
    if t is None or per is None or per - shared <= 0:
        return None
    return float(max(1, math.floor((t - shared) / (per - shared))))


def _budget_for_itl_target(c: Context, v: Values) -> Value:
    """The largest power-of-two token budget whose predicted ITL p95 meets the ITL target.

    A step's time grows with the prefill tokens it carries: ITL p50 is a step without a prefill
    chunk, ITL p95 one with a full chunk of min(budget, mean prompt) tokens, so the stall per
    prefill token is their difference over that chunk. On the H200 (8B, ~6k-token prompts) this
    fits the measured ITL p95 at 16384, 8192 and 2048 within ~15% (docs/validation.md)."""
    target = c.targets.get("itl_p95_seconds")
    p50, p95 = v["itl_seconds_p50"], v["itl_seconds_p95"]
    budget, prompt = v["max_num_batched_tokens"], v["prompt_tokens_mean"]
    if target is None or p50 is None or p95 is None or budget is None or prompt is None:
        return None
    chunk = min(budget, prompt)
    if p95 <= p50 or chunk < 1 or target <= p50:
        return None
    tokens = (target - p50) * chunk / (p95 - p50)
    return float(2 ** math.floor(math.log2(tokens))) if tokens >= 1 else 1.0


def _budget_batch(c: Context, v: Values) -> Value:
    """The running batch one engine's token budget sustains: a request needs its prompt and its
    output, the output one token a step, so a step of max_num_batched_tokens tokens carries at
    most budget / (1 + prompt/output) requests' worth of work."""
    b, p, g = v["max_num_batched_tokens"], v["prompt_tokens_mean"], v["generation_tokens_mean"]
    if b is None or p is None or g is None or g <= 0:
        return None
    return b / (1.0 + p / g)


def _budget_binds(c: Context, v: Values) -> Value:
    """1 when the token budget, not the cap or the load, limits the batch: the requests waiting
    and running (per engine, at their highest) outnumber the batch the budget sustains, which is
    below max_num_seqs. Then the queue is the prefill backlog of the budget."""
    sustained, engines = v["budget_sustained_batch"], v["engines"] or 1.0
    demand_v = v["requests_in_system_max"]
    if sustained is None or demand_v is None:
        return None
    demand = demand_v / engines
    cap = v["max_num_seqs"]
    return 1.0 if sustained < min(demand, cap if cap is not None else math.inf) else 0.0


def _in_system_max(c: Context, v: Values) -> Value:
    """Requests waiting plus running on one page, at the highest (all engines): the offered load.
    From the window's per-page totals (kept as pages arrive), not by rebuilding the pages."""
    running, waiting = c.window.totals(n.NUM_RUNNING, c.seconds), c.window.totals(n.NUM_WAITING, c.seconds)
    vals = [r + w for (_, r), (_, w) in zip(running, waiting, strict=True) if r is not None and w is not None]
    return max(vals) if vals else None


def _backlog_share(c: Context, v: Values) -> Value:
    pre, q, binds = v["prefill_share_of_ttft"], v["queue_share_of_ttft"], v["prefill_budget_binds"]
    if pre is None or binds is None:
        return None
    if not binds:
        return pre
    return None if q is None else pre + q


def _queue_outside_budget(c: Context, v: Values) -> Value:
    q, binds = v["queue_share_of_ttft"], v["prefill_budget_binds"]
    if q is None or binds is None:
        return None
    return 0.0 if binds else q


def _recompute_ratio(c: Context, v: Values) -> Value:
    """Recomputed prefill tokens per prompt token. Where preempted prefills show up in
    ``prefix_cache_queries`` (vLLM 0.25 on GPU), that excess is measured; otherwise it is
    estimated as preemptions x (prompt mean + half the generation mean)."""
    pre = v["preemptions"]
    prompt = c.window.counter_delta(n.PROMPT_TOKENS, c.seconds)
    if pre is None or prompt is None or prompt <= 0:
        return None
    queries = c.window.counter_delta(n.PREFIX_CACHE_QUERIES, c.seconds)
    measured = (queries - prompt) / prompt if queries is not None and queries > prompt * 1.01 else 0.0
    pm, gm = v["prompt_tokens_mean"], v["generation_tokens_mean"]
    estimated = pre * (pm + gm / 2) / prompt if pm is not None and gm is not None else 0.0
    return max(measured, estimated)


def _waiting_reason(reason: str, how: str) -> Callable[[Context, Values], Value]:
    return _gauge(n.NUM_WAITING_BY_REASON, how, "total", reason=reason)


def _aborted_rate(c: Context, v: Values) -> Value:
    return c.window.rate(n.REQUEST_SUCCESS, c.seconds, {"finished_reason": "abort"})


def _api_cpu(c: Context, v: Values) -> Value:
    # process_cpu_seconds on vLLM's /metrics is the API server process's own CPU time
    return c.window.rate("process_cpu_seconds", c.seconds)


def _flag_fact(name: str) -> Callable[[Context, Values], Value]:
    """A yes/no fact of the engine (model facts from advisor/sources/engine.py) as 1/0."""

    def fn(c: Context, v: Values) -> Value:
        x = c.engine.get(name)
        return None if x is None else (1.0 if bool(x) else 0.0)

    return fn


def _frontend_seconds(c: Context, v: Values) -> Value:
    # vLLM stamps a request's arrival when the API server starts rendering it (chat template,
    # media loading, tokenisation, multimodal processing); the engine's queue and prefill
    # histograms start when the engine has it. TTFT minus both is the front end's share.
    ttft, queue, prefill = v["ttft_seconds_mean"], v["queue_seconds_mean"], v["prefill_seconds_mean"]
    if ttft is None or queue is None or prefill is None:
        return None
    return max(0.0, ttft - queue - prefill)


def _tp_x_dp(c: Context, v: Values) -> Value:
    tp, dp = v["tensor_parallel_size"], v["data_parallel_size"]
    return None if tp is None or dp is None else tp * dp


# ------------------------------------------------------------------ the catalog
_LATENCIES = [
    ("ttft_seconds", n.TTFT, "time to first token", "vllm:time_to_first_token_seconds"),
    ("itl_seconds", n.ITL, "inter-token latency", "vllm:inter_token_latency_seconds"),
    (
        "tpot_seconds",
        n.TPOT,
        "time per output token of a request",
        "vllm:request_time_per_output_token_seconds",
    ),
    ("e2e_seconds", n.E2E, "end-to-end request latency", "vllm:e2e_request_latency_seconds"),
    ("queue_seconds", n.QUEUE_TIME, "time a request waited in the queue", "vllm:request_queue_time_seconds"),
    (
        "prefill_seconds",
        n.PREFILL_TIME,
        "time a request spent in prefill",
        "vllm:request_prefill_time_seconds",
    ),
    ("decode_seconds", n.DECODE_TIME, "time a request spent decoding", "vllm:request_decode_time_seconds"),
]
PLUGIN_QUANTITY = {
    "ttft_seconds": "ttft",
    "itl_seconds": "itl",
    "tpot_seconds": "tpot",
    "e2e_seconds": "e2e",
    "queue_seconds": "queue",
    "prefill_seconds": "prefill",
}
"""Latency signal base -> the plugin's quantity (derive.sketches.QUANTITIES); decode has none."""
_SIZES = [
    ("prompt_tokens", n.REQUEST_PROMPT_TOKENS, "prompt length per request", "vllm:request_prompt_tokens"),
    (
        "generation_tokens",
        n.REQUEST_GENERATION_TOKENS,
        "output length per request",
        "vllm:request_generation_tokens",
    ),
]


def _hmean_q(metric: str) -> str:
    """PromQL: a histogram's mean over the window (sum of observations over their count)."""
    return f"sum(rate({metric}_sum[{{w}}])) / sum(rate({metric}_count[{{w}}]))"


def _hq(metric: str, q: float) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket[{{w}}])))"


_KNOB_Q = 'scalar(max(vllm_advisor_engine_knob{{knob="%s"}}))'
# the twins of the budget-backlog signals, composed as the Python computes them; a knob only on
# the right of an operator (alerts.group_twin joins it on the instance there)
_SUSTAINED_Q = (
    f"(1 / (1 + ({_hmean_q('vllm:request_prompt_tokens')}) / ({_hmean_q('vllm:request_generation_tokens')})))"
    f" * {_KNOB_Q % 'max_num_batched_tokens'}"
)
_IN_SYSTEM_Q = "max_over_time((sum(vllm:num_requests_running) + sum(vllm:num_requests_waiting))[{w}:])"
_ENGINES_Q = "count(count by (engine) (vllm:num_requests_running))"
# sustained < min(offered per engine, max_num_seqs), as two comparisons (unknown cap: no result)
_BINDS_Q = (
    f"((({_SUSTAINED_Q}) < bool (({_IN_SYSTEM_Q}) / ({_ENGINES_Q})))"
    f" * (({_SUSTAINED_Q}) < bool {_KNOB_Q % 'max_num_seqs'}))"
)
_QUEUE_SHARE_Q = (
    f"({_hmean_q('vllm:request_queue_time_seconds')}) / ({_hmean_q('vllm:time_to_first_token_seconds')})"
)
_PREFILL_SHARE_Q = (
    f"({_hmean_q('vllm:request_prefill_time_seconds')}) / ({_hmean_q('vllm:time_to_first_token_seconds')})"
)
_FACT_Q = 'scalar(max(vllm_advisor_engine_fact{{fact="%s"}}))'
# the KV twins, composed as the Python computes them; a knob or fact only on the right of an
# operator (recording.group_twin joins it on the instance there)
_BLOCK_Q = _KNOB_Q % "block_size"
_PROMPT_MEAN_Q = _hmean_q("vllm:request_prompt_tokens")
_KV_PER_REQUEST_Q = (
    f"ceil((({_PROMPT_MEAN_Q}) + ({_hmean_q('vllm:request_generation_tokens')}) - 1)"
    f" / {_BLOCK_Q}) * {_BLOCK_Q}"
)
# the prefix-cache hit per prompt to whole blocks; 0 (the prompt mean times 0: vector() cannot be
# grouped) where no token was queried or the counters are absent
_HIT_RATIO_Q = (
    "sum(rate(vllm:prefix_cache_hits_total[{w}])) / (sum(rate(vllm:prefix_cache_queries_total[{w}])) > 0)"
)
_KV_SHARED_Q = (
    f"round((({_HIT_RATIO_Q}) or (({_PROMPT_MEAN_Q}) * 0)) * ({_PROMPT_MEAN_Q}) / {_BLOCK_Q}) * {_BLOCK_Q}"
)
# floor((kv_cache_tokens - shared) / (per request - shared)) with the fact on the right:
# 1 / (own / tokens) - shared / own; the 1e-9 keeps a whole quotient whole through the divisions
_KV_OWN_Q = f"(({_KV_PER_REQUEST_Q}) - ({_KV_SHARED_Q}))"
_KV_SUSTAINED_Q = f"clamp_min(floor(1 / ({_KV_OWN_Q} / {_FACT_Q % 'kv_cache_tokens'}) - ({_KV_SHARED_Q}) / {_KV_OWN_Q} + 1e-9), 1)"
_RUNNING_ENGINE_MAX_Q = "max(max_over_time(vllm:num_requests_running[{w}]))"
_PROMPT_INCREASE_Q = "sum(increase(vllm:prompt_tokens_total[{w}]))"
# recomputed prefill: measured (prefix-cache queries beyond the prompt tokens, counted where it
# is more than 1%), or estimated (preemptions x (prompt mean + half the output mean)), the larger
_RECOMPUTE_MEASURED_Q = f"((sum(increase(vllm:prefix_cache_queries_total[{{w}}])) - {_PROMPT_INCREASE_Q}) / {_PROMPT_INCREASE_Q} > 0.01)"
_RECOMPUTE_ESTIMATED_Q = (
    "(sum(increase(vllm:num_preemptions_total[{w}]))"
    f" * (({_hmean_q('vllm:request_prompt_tokens')}) + ({_hmean_q('vllm:request_generation_tokens')}) / 2)"
    f" / {_PROMPT_INCREASE_Q})"
)
_RECOMPUTE_Q = (
    f"({_RECOMPUTE_MEASURED_Q} >= {_RECOMPUTE_ESTIMATED_Q}) or {_RECOMPUTE_ESTIMATED_Q}"
    f" or {_RECOMPUTE_MEASURED_Q} or ({_PROMPT_INCREASE_Q} * 0)"
)


# ------------------------------------------------------------------ the scheduler levers (issue 31)
SOURCE_HELP: dict[str, dict[str, str]] = {
    "ttft_short_prompts_seconds_p95": {
        sketches.SOURCE_PLUGIN: "Time to first token of the short prompts, p95: the stat-logger plugin's "
        "shortest prompt-length bucket, its own requests (within its 1% accuracy).",
        sketches.SOURCE_HISTOGRAM: "Time to first token of the short prompts, p95, ESTIMATED: the median "
        "request's TTFT (without the stat-logger plugin vLLM's histogram mixes every length; the "
        "median prompt is short).",
    }
}
"""Help lines of signals whose meaning depends on their source (see :func:`help_for`)."""


def _ttft_short_prompts_p95(c: Context, v: Values) -> Value:
    """TTFT p95 of the short prompts: the plugin's shortest prompt-length bucket when the page
    carries it (its own requests, exact within 1%); without the plugin the median request's
    TTFT (vLLM's histogram mixes every length: the split is estimated)."""
    labels = sketches.bucket_labels(c.window, "prompt")
    if labels:
        est = c.window.memo(
            ("plugin-latency-bucket", "ttft", labels[0], c.seconds),
            lambda: sketches.latency(c.window, "ttft", c.seconds, prompt_bucket=labels[0]),
        )
        x = est.quantile(0.95) if isinstance(est, sketches.SketchLatency) else None
        if x is not None:
            v.sources["ttft_short_prompts_seconds_p95"] = sketches.SOURCE_PLUGIN
            return x
    v.sources["ttft_short_prompts_seconds_p95"] = sketches.SOURCE_HISTOGRAM
    return v["ttft_seconds_p50"]


def _long_prefill_threshold(c: Context, v: Values) -> Value:
    """A quarter of the budget (three quarters left beside a long prompt's chunk: 2048 of
    8192, issue 31's value), never below the median prompt (short prompts stay whole), in whole
    blocks; None without the budget."""
    b = v["max_num_batched_tokens"]
    if b is None or b <= 0:
        return None
    bs = _block_size(c)
    t = max(b // 4 // bs * bs, bs)
    p50 = v["prompt_tokens_p50"]
    if p50 is not None:
        t = max(t, math.ceil(p50 / bs) * bs)
    return float(min(t, b))


def _preempted_repeatedly(c: Context, v: Values) -> Value:
    """Share of the requests finished in the window that vLLM preempted twice or more
    (vllm:request_num_preemptions, 0.30+: bucket le=1 is the once-or-never)."""
    h = c.window.histogram_delta(n.REQUEST_NUM_PREEMPTIONS, c.seconds)
    if h is None or h.count <= 0:
        return None
    return max(0.0, 1.0 - h.cumulative(1.0) / h.count)


def _preemptions_per_request(c: Context, v: Values) -> Value:
    h = c.window.histogram_delta(n.REQUEST_NUM_PREEMPTIONS, c.seconds)
    if h is not None and h.count > 0:
        return h.sum / h.count
    return _div(v["preemptions"], v["requests_finished"])


THRASH_PREEMPTIONS_PER_REQUEST = 1.0
THRASH_REPEATED_SHARE = 0.3
THRASH_BATCH_OVER_KV = 1.5
"""Preemption thrash (rules/kv-preemption-thrash.yaml uses the same three): each finished request
preempted once or more on average, 30% of them twice or more, and the batch vLLM admits 1.5
times what the KV cache holds at the observed sizes (50% more memory cannot hold it)."""


def _preemption_thrash(c: Context, v: Values) -> Value:
    """1 when the three thrash conditions hold, 0 when one of them is known not to, None when
    one is unknown (the KV rules' memory steps stand aside only on a 1)."""
    got = (
        (v["preemptions_per_finished_request"], THRASH_PREEMPTIONS_PER_REQUEST),
        (v["requests_preempted_repeatedly_ratio"], THRASH_REPEATED_SHARE),
        (v["batch_to_kv_sustained_ratio"], THRASH_BATCH_OVER_KV),
    )
    if any(x is not None and x < at for x, at in got):
        return 0.0
    if any(x is None for x, _ in got):
        return None
    return 1.0


WATERMARK_TOKENS_PER_RUNNING = 16
"""Decode headroom the watermark keeps per running request, in tokens (one block of a GPU cache:
vllm#44594's 0.02 is about this at 256 running on ~200k tokens)."""


def _watermark_for_batch(c: Context, v: Values) -> Value:
    """16 tokens of headroom per request of the largest batch (at least one block), as a share
    of the cache, rounded up to 0.01, 0.01 to 0.5: each running request can grow a little before
    an admission would have to evict it."""
    r, t = v["requests_running_per_engine_max"], v["kv_cache_tokens"]
    if r is None or t is None or t <= 0 or r <= 0:
        return None
    w = max(r * WATERMARK_TOKENS_PER_RUNNING, _block_size(c)) / t
    return min(0.5, max(0.01, math.ceil(w * 100 - 1e-9) / 100))


def _build() -> Iterator[Signal]:
    S = Signal
    yield S(
        "preemptions_per_second",
        "per_second",
        "Requests preempted per second (KV cache full; their work is recomputed).",
        _rate(n.NUM_PREEMPTIONS),
        "sum(rate(vllm:num_preemptions_total[{w}]))",
    )
    yield S(
        "preemptions",
        "count",
        "Preemptions in the evaluation window.",
        _delta(n.NUM_PREEMPTIONS),
        "sum(increase(vllm:num_preemptions_total[{w}]))",
    )
    yield S(
        "preemption_recompute_ratio",
        "ratio",
        "Prefill tokens recomputed because of preemption, per prompt token (the cost of preemption).",
        _recompute_ratio,
        _RECOMPUTE_Q,
    )
    yield S(
        "kv_cache_usage_ratio_avg",
        "ratio",
        "KV cache usage (share of blocks in use), mean over engines and time.",
        _gauge(n.KV_CACHE_USAGE, "avg", "mean"),
        "avg(avg_over_time(vllm:kv_cache_usage_perc[{w}]))",
    )
    yield S(
        "kv_cache_usage_ratio_max",
        "ratio",
        "KV cache usage, highest in the window (mean over engines).",
        _gauge(n.KV_CACHE_USAGE, "max", "mean"),
        "max(max_over_time(vllm:kv_cache_usage_perc[{w}]))",
    )
    yield S(
        "requests_running_avg",
        "requests",
        "Requests in the running batch, mean (all engines).",
        _gauge(n.NUM_RUNNING, "avg"),
        "sum(avg_over_time(vllm:num_requests_running[{w}]))",
    )
    yield S(
        "requests_running_max",
        "requests",
        "Requests in the running batch, highest (all engines).",
        _gauge(n.NUM_RUNNING, "max"),
        "max_over_time(sum(vllm:num_requests_running)[{w}:])",
    )
    yield S(
        "requests_running_per_engine_max",
        "requests",
        "Highest running batch of any one engine.",
        _running_per_engine_max,
        "max(max_over_time(vllm:num_requests_running[{w}]))",
    )
    yield S(
        "requests_waiting_avg",
        "requests",
        "Requests waiting in the queue, mean (all engines).",
        _gauge(n.NUM_WAITING, "avg"),
        "sum(avg_over_time(vllm:num_requests_waiting[{w}]))",
    )
    yield S(
        "requests_waiting_max",
        "requests",
        "Requests waiting in the queue, highest (all engines).",
        _gauge(n.NUM_WAITING, "max"),
        "max_over_time(sum(vllm:num_requests_waiting)[{w}:])",
    )
    yield S(
        "waiting_to_running_ratio",
        "ratio",
        "Mean waiting over mean running requests: a standing queue when well above 0.",
        lambda c, v: _div(v["requests_waiting_avg"], v["requests_running_avg"]),
        "sum(avg_over_time(vllm:num_requests_waiting[{w}])) / sum(avg_over_time(vllm:num_requests_running[{w}]))",
    )
    yield S(
        "requests_waiting_capacity_avg",
        "requests",
        "Requests waiting for capacity (KV or batch slots), mean.",
        _waiting_reason("capacity", "avg"),
        'sum(avg_over_time(vllm:num_requests_waiting_by_reason{{reason="capacity"}}[{w}]))',
    )
    yield S(
        "requests_waiting_deferred_avg",
        "requests",
        "Requests deferred by the scheduler, mean.",
        _waiting_reason("deferred", "avg"),
        'sum(avg_over_time(vllm:num_requests_waiting_by_reason{{reason="deferred"}}[{w}]))',
    )
    yield S(
        "engines",
        "count",
        "Engines (data-parallel ranks) on the page.",
        _engines,
        _ENGINES_Q,
    )
    yield S(
        "running_to_max_num_seqs_ratio",
        "ratio",
        "Highest running batch of one engine relative to max_num_seqs (1 = the cap binds).",
        lambda c, v: _div(v["requests_running_per_engine_max"], v["max_num_seqs"]),
        'max(max_over_time(vllm:num_requests_running[{w}])) / scalar(max(vllm_advisor_engine_knob{{knob="max_num_seqs"}}))',
    )
    yield S(
        "requests_per_second",
        "per_second",
        "Requests finished per second (any reason).",
        _rate(n.REQUEST_SUCCESS),
        "sum(rate(vllm:request_success_total[{w}]))",
    )
    yield S(
        "requests_finished",
        "count",
        "Requests finished in the window.",
        _delta(n.REQUEST_SUCCESS),
        "sum(increase(vllm:request_success_total[{w}]))",
    )
    yield S(
        "requests_aborted_per_second",
        "per_second",
        "Requests aborted per second.",
        _aborted_rate,
        'sum(rate(vllm:request_success_total{{finished_reason="abort"}}[{w}]))',
    )
    yield S(
        "request_abort_ratio",
        "ratio",
        "Share of finished requests that were aborted.",
        lambda c, v: _div(v["requests_aborted_per_second"], v["requests_per_second"]),
        'sum(rate(vllm:request_success_total{{finished_reason="abort"}}[{w}])) / sum(rate(vllm:request_success_total[{w}]))',
    )
    yield S(
        "prompt_tokens_per_second",
        "tokens_per_second",
        "Prompt (prefill) tokens per second.",
        _rate(n.PROMPT_TOKENS),
        "sum(rate(vllm:prompt_tokens_total[{w}]))",
    )
    yield S(
        "generation_tokens_per_second",
        "tokens_per_second",
        "Generated tokens per second (throughput).",
        _rate(n.GENERATION_TOKENS),
        "sum(rate(vllm:generation_tokens_total[{w}]))",
    )
    for base, metric, what, raw in _LATENCIES:
        for q in (0.5, 0.95, 0.99):
            pct = f"p{round(q * 100)}"
            yield S(
                f"{base}_{pct}",
                "seconds",
                f"{what.capitalize()}, {pct} over the window {HISTOGRAM_NOTE}.",
                _latency_quantile(f"{base}_{pct}", metric, PLUGIN_QUANTITY.get(base), q),
                _hq(raw, q),
            )
        yield S(
            f"{base}_mean",
            "seconds",
            f"{what.capitalize()}, mean over the window (exact).",
            _hmean(metric),
            _hmean_q(raw),
        )
    for base, metric, what, raw in _SIZES:
        for q in (0.5, 0.95, 0.99):
            pct = f"p{round(q * 100)}"
            yield S(
                f"{base}_{pct}",
                "tokens",
                f"{what.capitalize()}, {pct} (histogram buckets: coarse).",
                _quantile(metric, q),
                _hq(raw, q),
            )
        yield S(
            f"{base}_mean",
            "tokens",
            f"{what.capitalize()}, mean (exact).",
            _hmean(metric),
            _hmean_q(raw),
        )
    yield S(
        "itl_tail_ratio",
        "ratio",
        "ITL p95 over ITL p50: decode stutter when far above 1.",
        lambda c, v: _div(v["itl_seconds_p95"], v["itl_seconds_p50"]),
        f"({_hq('vllm:inter_token_latency_seconds', 0.95)}) / ({_hq('vllm:inter_token_latency_seconds', 0.5)})",
    )
    yield S(
        "queue_share_of_ttft",
        "ratio",
        "Mean queue time over mean TTFT: TTFT is queue time when near 1.",
        lambda c, v: _div(v["queue_seconds_mean"], v["ttft_seconds_mean"]),
        _QUEUE_SHARE_Q,
    )
    yield S(
        "prefill_share_of_ttft",
        "ratio",
        "Mean prefill time over mean TTFT: TTFT is prefill when near 1.",
        lambda c, v: _div(v["prefill_seconds_mean"], v["ttft_seconds_mean"]),
        _PREFILL_SHARE_Q,
    )
    yield S(
        "frontend_seconds_mean",
        "seconds",
        "Mean TTFT not spent in the engine's queue or prefill: the API server's rendering, media "
        "loading, tokenisation and multimodal processing, and the hand-over to the engine (read "
        "from vLLM's histograms, so it survives --api-server-count > 1, where "
        "process_cpu_seconds_total is gone).",
        _frontend_seconds,
        f"clamp_min(({_hmean_q('vllm:time_to_first_token_seconds')})"
        f" - ({_hmean_q('vllm:request_queue_time_seconds')})"
        f" - ({_hmean_q('vllm:request_prefill_time_seconds')}), 0)",
    )
    yield S(
        "frontend_share_of_ttft",
        "ratio",
        "frontend_seconds_mean over mean TTFT: the front end is the bottleneck when near 1.",
        lambda c, v: _div(v["frontend_seconds_mean"], v["ttft_seconds_mean"]),
        f"clamp_min(({_hmean_q('vllm:time_to_first_token_seconds')})"
        f" - ({_hmean_q('vllm:request_queue_time_seconds')})"
        f" - ({_hmean_q('vllm:request_prefill_time_seconds')}), 0)"
        f" / ({_hmean_q('vllm:time_to_first_token_seconds')})",
    )
    yield S(
        "requests_in_system_max",
        "requests",
        "Requests waiting plus running at once, highest (all engines): the offered load.",
        _in_system_max,
        _IN_SYSTEM_Q,
    )
    yield S(
        "budget_sustained_batch",
        "requests",
        "Running batch one engine's max_num_batched_tokens sustains at the observed prompt and output "
        "lengths: budget / (1 + prompt/output).",
        _budget_batch,
        _SUSTAINED_Q,
    )
    yield S(
        "prefill_budget_binds",
        "info",
        "1 when the token budget limits the batch (more requests wait and run than it sustains, below "
        "the cap): the queue is the prefill backlog of the budget.",
        _budget_binds,
        _BINDS_Q,
    )
    yield S(
        "prefill_backlog_share_of_ttft",
        "ratio",
        "Share of TTFT that is prefill work: prefill time, plus queue time where the queue is the "
        "budget's prefill backlog (prefill_budget_binds).",
        _backlog_share,
        f"({_PREFILL_SHARE_Q}) + ({_QUEUE_SHARE_Q}) * {_BINDS_Q}",
    )
    yield S(
        "queue_share_outside_budget",
        "ratio",
        "Share of TTFT spent queued for something other than the token budget (0 where the queue is "
        "its prefill backlog).",
        _queue_outside_budget,
        f"({_QUEUE_SHARE_Q}) * (1 - {_BINDS_Q})",
    )
    yield S(
        "prompt_tokens_per_generation_token",
        "ratio",
        "Prefill tokens per generated token: prefills share the batches with decodes when well above 0.",
        lambda c, v: _div(v["prompt_tokens_per_second"], v["generation_tokens_per_second"]),
        "sum(rate(vllm:prompt_tokens_total[{w}])) / sum(rate(vllm:generation_tokens_total[{w}]))",
    )
    yield S(
        "prompt_to_budget_ratio",
        "ratio",
        "Mean prompt length over max_num_batched_tokens: above 1, a prompt needs several steps to prefill.",
        lambda c, v: _div(v["prompt_tokens_mean"], v["max_num_batched_tokens"]),
        f"({_hmean_q('vllm:request_prompt_tokens')})"
        ' / scalar(max(vllm_advisor_engine_knob{{knob="max_num_batched_tokens"}}))',
    )
    yield S(
        "prefix_cache_hit_ratio",
        "ratio",
        "Prefix cache hits per query (tokens).",
        lambda c, v: _div(
            c.window.counter_delta(n.PREFIX_CACHE_HITS, c.seconds),
            c.window.counter_delta(n.PREFIX_CACHE_QUERIES, c.seconds),
        ),
        "sum(rate(vllm:prefix_cache_hits_total[{w}])) / sum(rate(vllm:prefix_cache_queries_total[{w}]))",
    )
    yield S(
        "mm_cache_queries_per_second",
        "per_second",
        "Multimodal processor cache queries per second.",
        _rate(n.MM_CACHE_QUERIES),
        "sum(rate(vllm:mm_cache_queries_total[{w}]))",
    )
    yield S(
        "mm_cache_hit_ratio",
        "ratio",
        "Multimodal processor cache hits per query.",
        lambda c, v: _div(
            c.window.counter_delta(n.MM_CACHE_HITS, c.seconds),
            c.window.counter_delta(n.MM_CACHE_QUERIES, c.seconds),
        ),
        "sum(rate(vllm:mm_cache_hits_total[{w}])) / sum(rate(vllm:mm_cache_queries_total[{w}]))",
    )
    yield S(
        "admission_rejections_per_second",
        "per_second",
        "Requests refused at admission (HTTP 503) per second because a queue limit was reached "
        "(--max-num-queued-reqs / --max-num-queued-tokens; vllm:admission_rejections, 0.32+).",
        _rate(n.ADMISSION_REJECTIONS),
        "sum(rate(vllm:admission_rejections_total[{w}]))",
    )
    yield S(
        "admission_rejection_ratio",
        "ratio",
        "Share of the requests that reached the server that were refused at admission: "
        "rejections over rejections plus finished requests.",
        _admission_ratio,
        "sum(rate(vllm:admission_rejections_total[{w}])) / (sum(rate(vllm:admission_rejections_total[{w}]))"
        " + sum(rate(vllm:request_success_total[{w}])))",
    )
    yield S(
        "admission_rejections_by_tokens_share",
        "ratio",
        "Share of the admission rejections due to --max-num-queued-tokens (the rest: --max-num-queued-reqs).",
        _admission_tokens_share,
        'sum(rate(vllm:admission_rejections_total{{reason="max_num_queued_tokens"}}[{w}]))'
        " / sum(rate(vllm:admission_rejections_total[{w}]))",
    )
    yield S(
        "spec_decode_acceptance_ratio",
        "ratio",
        "Speculative decoding: accepted draft tokens per draft token proposed (vllm:spec_decode_* "
        "counters; without them the log's 'SpecDecoding metrics' lines).",
        _spec_acceptance,
        "sum(rate(vllm:spec_decode_num_accepted_tokens_total[{w}]))"
        " / sum(rate(vllm:spec_decode_num_draft_tokens_total[{w}]))",
    )
    yield S(
        "spec_decode_mean_acceptance_length",
        "tokens",
        "Speculative decoding: tokens a target-model step emits per draft (1 + accepted per draft, "
        "the bonus token counted, as vLLM logs it).",
        _spec_mean_length,
        "1 + sum(rate(vllm:spec_decode_num_accepted_tokens_total[{w}]))"
        " / sum(rate(vllm:spec_decode_num_drafts_total[{w}]))",
    )
    yield S(
        "spec_decode_draft_tokens",
        "tokens",
        "Tokens the draft proposes per step (num_speculative_tokens; measured as draft tokens per "
        "draft where the knob is not known).",
        _spec_tokens,
        "sum(rate(vllm:spec_decode_num_draft_tokens_total[{w}])) / sum(rate(vllm:spec_decode_num_drafts_total[{w}]))",
    )
    yield S(
        "engine_sleeping",
        "info",
        '1 while an engine sleeps (vllm:engine_sleep_state{sleep_state="awake"} is 0: level 1 '
        "offloaded its weights, level 2 discarded them); 0 when awake; unknown before 0.29.",
        _sleeping,
        'max(vllm:engine_sleep_state{{sleep_state="awake"}} == bool 0)',
    )
    yield S(
        "prefill_budget_for_itl_target",
        "tokens",
        "Largest power-of-two max_num_batched_tokens whose predicted ITL p95 meets the ITL target "
        "(step time grows linearly with the prefill tokens in it).",
        _budget_for_itl_target,
        None,
    )
    yield S(
        "kv_cache_tokens",
        "tokens",
        "KV cache capacity of one engine, in tokens.",
        _kv_tokens,
        'max(vllm_advisor_engine_fact{{fact="kv_cache_tokens"}})',
        per="config",
    )
    yield S(
        "kv_tokens_per_request",
        "tokens",
        "KV a finished request holds: mean prompt + mean output - 1, rounded up to whole blocks (the "
        "PromQL twin reads block_size from vllm_advisor_engine_knob; the Python takes 16 where it is unknown).",
        _kv_tokens_per_request,
        _KV_PER_REQUEST_Q,
    )
    yield S(
        "kv_shared_prefix_tokens",
        "tokens",
        "Prefix-cache hits per prompt, to whole blocks: read as a prefix the requests share (a system "
        "prompt), whose blocks vLLM holds once (the PromQL twin reads block_size from "
        "vllm_advisor_engine_knob; the Python takes 16 where it is unknown).",
        _kv_shared_prefix,
        _KV_SHARED_Q,
    )
    yield S(
        "kv_sustained_concurrency",
        "requests",
        "Requests the KV cache of one engine holds at once at the observed request sizes (a shared "
        "prefix held once: kv_shared_prefix_tokens).",
        _kv_sustained,
        _KV_SUSTAINED_Q,
    )
    yield S(
        "kv_capacity_requests_at_max_len",
        "requests",
        "Requests of max_model_len tokens the KV cache of one engine holds (vLLM's 'maximum concurrency').",
        lambda c, v: (
            _div(v["kv_cache_tokens"], v["max_model_len"])
            if c.engine.get("max_concurrency") is None
            else float(c.engine.get("max_concurrency"))
        ),
        # the advisor's facts only (vLLM's /metrics carries them as labels, not values)
        'max(vllm_advisor_engine_fact{{fact="max_concurrency"}})'
        ' or max(vllm_advisor_engine_fact{{fact="kv_cache_tokens"}})'
        ' / max(vllm_advisor_engine_knob{{knob="max_model_len"}})',
    )
    yield S(
        "tokens_in_flight_per_running_request",
        "tokens",
        "KV tokens held per running request (KV usage x capacity / running, per engine).",
        lambda c, v: _div(
            None
            if v["kv_cache_usage_ratio_avg"] is None or v["kv_cache_tokens"] is None
            else v["kv_cache_usage_ratio_avg"] * v["kv_cache_tokens"],
            _div(v["requests_running_avg"], v["engines"]),
        ),
        "avg(avg_over_time(vllm:kv_cache_usage_perc[{w}]))"
        f" * {_FACT_Q % 'kv_cache_tokens'}"
        f" / (sum(avg_over_time(vllm:num_requests_running[{{w}}])) / {_ENGINES_Q})",
    )
    yield S(
        "api_server_cpu_cores",
        "cores",
        "CPU used by vLLM's API-server process (cores; ~1 = saturated).",
        _api_cpu,
        'sum(rate(process_cpu_seconds_total{{job=~".*vllm.*"}}[{w}]))',
    )
    yield S(
        "window_seconds",
        "seconds",
        "Time covered by the snapshots in the evaluation window.",
        lambda c, v: c.window.duration(c.seconds) or None,
        None,
    )
    yield S(
        "engine_stalled_seconds",
        "seconds",
        "How long no prompt or generation token has been counted while requests wait or run "
        "(0: tokens are counted or nothing is asked); from 30 s on the engine is stalled.",
        _stalled_seconds,
        None,
    )
    for knob, help_ in [
        ("max_num_seqs", "max_num_seqs the engine runs with."),
        ("max_num_batched_tokens", "max_num_batched_tokens the engine runs with."),
        ("gpu_memory_utilization", "gpu_memory_utilization the engine runs with."),
        ("max_model_len", "max_model_len the engine runs with."),
        ("tensor_parallel_size", "tensor_parallel_size the engine runs with."),
        ("pipeline_parallel_size", "pipeline_parallel_size the engine runs with."),
        ("data_parallel_size", "data_parallel_size the engine runs with."),
        ("api_server_count", "api_server_count the server runs with."),
    ]:
        yield S(
            knob,
            "count" if "size" in knob or "count" in knob else "info",
            help_,
            _knob(knob),
            f'max(vllm_advisor_engine_knob{{{{knob="{knob}"}}}})',
            per="config",
        )
    yield S(
        "enforce_eager",
        "info",
        "1 when the engine runs eagerly, without CUDA graphs (--enforce-eager; the command line, "
        "the log's engine config line).",
        _knob("enforce_eager"),
        'max(vllm_advisor_engine_knob{{knob="enforce_eager"}})',
        per="config",
    )
    yield S(
        "max_cudagraph_capture_size",
        "requests",
        "Largest batch captured as a CUDA graph (the log's compilation_config; default "
        "min(2 x max_num_seqs, 512)): a larger decode batch runs without one.",
        _capture_size,
        'max(vllm_advisor_engine_knob{{knob="max_cudagraph_capture_size"}})',
        per="config",
    )
    yield S(
        "running_to_cudagraph_capture_ratio",
        "ratio",
        "Highest running batch of one engine over the largest CUDA-graph capture size: above 1, "
        "the largest batches run without a CUDA graph.",
        lambda c, v: (
            None
            if not v["max_cudagraph_capture_size"]
            else _div(v["requests_running_per_engine_max"], v["max_cudagraph_capture_size"])
        ),
        "max(max_over_time(vllm:num_requests_running[{w}]))"
        ' / scalar(max(vllm_advisor_engine_knob{{knob="max_cudagraph_capture_size"}}))',
    )
    yield S(
        "device_is_gpu",
        "info",
        "1 when the server runs on a GPU, 0 on CPU (the device vLLM reports or the host probe).",
        _device_is_gpu,
        'max(vllm_advisor_engine_fact{{fact="device_is_gpu"}})',
        per="config",
    )
    yield S(
        "max_num_seqs_all_engines",
        "requests",
        "max_num_seqs times the engines on the page: the most requests the server runs at once.",
        lambda c, v: None if v["max_num_seqs"] is None else v["max_num_seqs"] * (v["engines"] or 1.0),
        f"{_ENGINES_Q} * {_KNOB_Q % 'max_num_seqs'}",
        per="config",
    )
    yield S(
        "tensor_x_data_parallel_size",
        "count",
        "tensor_parallel_size x data_parallel_size: the ranks an MoE model's experts are spread "
        "over with enable_expert_parallel.",
        _tp_x_dp,
        'max(vllm_advisor_engine_knob{{knob="tensor_parallel_size"}})'
        ' * max(vllm_advisor_engine_knob{{knob="data_parallel_size"}})',
        per="config",
    )
    yield S(
        "enable_expert_parallel",
        "info",
        "1 when the engine runs with expert parallelism (--enable-expert-parallel).",
        _knob("enable_expert_parallel"),
        'max(vllm_advisor_engine_knob{{knob="enable_expert_parallel"}})',
        per="config",
    )
    yield S(
        "mm_encoder_tp_data",
        "info",
        "1 when the multimodal encoder runs batch-level data-parallel (--mm-encoder-tp-mode data).",
        lambda c, v: (
            None
            if c.engine.get("mm_encoder_tp_mode") is None
            else (1.0 if str(c.engine.get("mm_encoder_tp_mode")) == "data" else 0.0)
        ),
        'max(vllm_advisor_engine_fact{{fact="mm_encoder_tp_data"}})',
        per="config",
    )
    yield S(
        "model_is_moe",
        "info",
        "1 when the model is a mixture of experts (its config.json, or its architecture name).",
        _flag_fact("model_is_moe"),
        'max(vllm_advisor_engine_fact{{fact="model_is_moe"}})',
        per="config",
    )
    yield S(
        "model_num_experts",
        "count",
        "Routed experts per MoE layer (the model's config.json).",
        _knob("model_num_experts"),
        'max(vllm_advisor_engine_fact{{fact="model_num_experts"}})',
        per="config",
    )
    yield S(
        "model_has_mm_encoder",
        "info",
        "1 when the model has a multimodal (vision/audio) encoder.",
        _flag_fact("model_has_mm_encoder"),
        'max(vllm_advisor_engine_fact{{fact="model_has_mm_encoder"}})',
        per="config",
    )
    yield S(
        "mm_encoder_tp_data_supported",
        "info",
        "1 when vLLM supports --mm-encoder-tp-mode data for the model's architecture.",
        _flag_fact("mm_encoder_tp_data_supported"),
        'max(vllm_advisor_engine_fact{{fact="mm_encoder_tp_data_supported"}})',
        per="config",
    )
    yield S(
        "gpus",
        "count",
        "GPUs on the host (nvidia-smi).",
        _knob("gpu_count"),
        'max(vllm_advisor_engine_fact{{fact="gpu_count"}})',
        per="config",
    )
    yield S(
        "gpu_memory_bytes",
        "bytes",
        "Memory of one GPU.",
        lambda c, v: (
            None if c.engine.get("gpu_memory_gib") is None else float(c.engine.get("gpu_memory_gib")) * 2**30
        ),
        'max(vllm_advisor_engine_fact{{fact="gpu_memory_bytes"}})',
        per="config",
    )
    yield S(
        "gpu_memory_free_bytes",
        "bytes",
        "Device memory left free once the engine started (the start-up log: the --kv-cache-memory "
        "that would fill the device less the KV cache, or the initial free memory less weights, KV "
        "and CUDA graphs; else the host's GPU probe). The KV rules' memory steps need room in it.",
        lambda c, v: (
            None
            if _num_or_none(c.engine.get("gpu_memory_free_gib")) is None
            else float(c.engine.get("gpu_memory_free_gib")) * 2**30
        ),
        'max(vllm_advisor_engine_fact{{fact="gpu_memory_free_bytes"}})',
        per="config",
    )
    yield S(
        "kv_cache_fp8",
        "info",
        "1 when the KV cache is stored in fp8 (--kv-cache-dtype fp8*, the cache_dtype label of "
        "vllm:cache_config_info); 0 for auto/bf16/fp16.",
        _kv_fp8,
        'max(vllm:cache_config_info{{cache_dtype=~"fp8.*"}}) or (max(vllm:cache_config_info) * 0)',
        per="config",
    )
    yield S(
        "weights_to_kv_memory_ratio",
        "ratio",
        "Model weights over the KV cache memory vLLM sized from gpu_memory_utilization on one GPU "
        "(the start-up log's 'Model loading took' and 'Available KV cache memory'; unknown when "
        "kv_cache_memory_bytes fixes the size). At 1 or more, a second GPU under tensor "
        "parallelism at least triples the KV a request stream has; data parallelism only doubles it.",
        _weights_to_kv,
        None,
        per="config",
    )
    yield S(
        "kv_size_fixed",
        "info",
        "1 when the KV size is fixed (kv_cache_memory_bytes or num_gpu_blocks_override).",
        lambda c, v: (
            1.0 if (c.engine.get("kv_cache_memory_bytes") or c.engine.get("num_gpu_blocks_override")) else 0.0
        ),
        # the exporter publishes every knob with a known number: neither there (nor non-zero) is 0
        'max(vllm_advisor_engine_knob{{knob=~"kv_cache_memory_bytes|num_gpu_blocks_override"}} > bool 0)'
        " or max(vllm_advisor_engine_knob) * 0",
        per="config",
    )

    yield S(
        "ttft_short_prompts_seconds_p95",
        "seconds",
        "Time to first token of the short prompts, p95: the stat-logger plugin's shortest "
        "prompt-length bucket; without the plugin estimated as the median request's TTFT (vLLM's "
        "histogram mixes every length; the median prompt is short).",
        _ttft_short_prompts_p95,
        _hq("vllm:time_to_first_token_seconds", 0.5),
    )
    yield S(
        "ttft_short_prompts_estimated",
        "info",
        "1: the short prompts' TTFT is ESTIMATED (no stat-logger plugin: vLLM's histograms mix every "
        "length, the median request's TTFT stands in); 0: the plugin's shortest prompt bucket, "
        "measured per request.",
        lambda c, v: (
            None
            if v["ttft_short_prompts_seconds_p95"] is None
            else 0.0
            if v.sources.get("ttft_short_prompts_seconds_p95") == sketches.SOURCE_PLUGIN
            else 1.0
        ),
        None,
    )
    yield S(
        "prompt_length_spread_ratio",
        "ratio",
        "Prompt length p99 over its median: a wide mix of long and short prompts when well above 1 "
        "(histogram buckets: coarse).",
        lambda c, v: _div(v["prompt_tokens_p99"], v["prompt_tokens_p50"]),
        f"({_hq('vllm:request_prompt_tokens', 0.99)}) / ({_hq('vllm:request_prompt_tokens', 0.5)})",
    )
    yield S(
        "long_prompt_to_budget_ratio",
        "ratio",
        "Prompt length p99 over max_num_batched_tokens: at 1 or more a long prompt's chunks fill "
        "whole steps.",
        lambda c, v: _div(v["prompt_tokens_p99"], v["max_num_batched_tokens"]),
        f"({_hq('vllm:request_prompt_tokens', 0.99)}) / {_KNOB_Q % 'max_num_batched_tokens'}",
    )
    yield S(
        "long_prefill_threshold_for_short_prompts",
        "tokens",
        "The long-prefill threshold that leaves short prompts room beside a long one's chunk: a "
        "quarter of max_num_batched_tokens (2048 of 8192), at least the median prompt, in whole blocks.",
        _long_prefill_threshold,
        None,
    )
    yield S(
        "long_prefill_token_threshold",
        "tokens",
        "long_prefill_token_threshold the engine runs with (0: no limit).",
        _knob("long_prefill_token_threshold"),
        'max(vllm_advisor_engine_knob{{knob="long_prefill_token_threshold"}})',
        per="config",
    )
    yield S(
        "preemptions_per_finished_request",
        "ratio",
        "Preemptions per request finished in the window (vllm:request_num_preemptions, 0.30+; "
        "before: preemptions over finished requests).",
        _preemptions_per_request,
        "sum(increase(vllm:request_num_preemptions_sum[{w}])) / sum(increase(vllm:request_num_preemptions_count[{w}]))",
    )
    yield S(
        "requests_preempted_repeatedly_ratio",
        "ratio",
        "Share of the finished requests preempted twice or more (vllm:request_num_preemptions, "
        "0.30+): the same requests evicted again and again.",
        _preempted_repeatedly,
        '1 - sum(increase(vllm:request_num_preemptions_bucket{{le="1.0"}}[{w}])) '
        "/ sum(increase(vllm:request_num_preemptions_count[{w}]))",
    )
    yield S(
        "batch_to_kv_sustained_ratio",
        "ratio",
        "Highest running batch of one engine over the requests its KV cache holds at the observed "
        "sizes: at 1.5 or more, 50% more KV memory cannot hold the batch vLLM admits.",
        lambda c, v: _div(v["requests_running_per_engine_max"], v["kv_sustained_concurrency"]),
        f"{_RUNNING_ENGINE_MAX_Q} / ({_KV_SUSTAINED_Q})",
    )
    yield S(
        "preemption_thrash",
        "info",
        "1 when vLLM preempts the same requests again and again with a batch 50% more KV memory "
        "cannot hold: preemptions per finished request >= 1, 30% of the requests preempted twice "
        "or more, the batch >= 1.5 x what the KV cache holds (kv-preemption-thrash's own three).",
        _preemption_thrash,
        None,
    )
    yield S(
        "watermark_for_running_batch",
        "ratio",
        "A KV watermark of 16 tokens of headroom per request of the largest batch (at least one "
        "block), as a share of the cache (0.01 to 0.5): an admission leaves the running requests "
        "room to grow.",
        _watermark_for_batch,
        None,
    )
    yield S(
        "watermark",
        "ratio",
        "watermark the engine runs with: the share of KV blocks an admission leaves free (0: none).",
        _knob("watermark"),
        'max(vllm_advisor_engine_knob{{knob="watermark"}})',
        per="config",
    )


CATALOG: dict[str, Signal] = {s.name: s for s in _build()}


def promql(signal: Signal, window: str = "5m") -> str | None:
    return signal.promql.format(w=window) if signal.promql else None


def describe(name: str) -> dict[str, Any]:
    s = CATALOG[name]
    return {"name": s.name, "unit": s.unit, "help": s.help, "promql": promql(s)}
