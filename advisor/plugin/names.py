"""Every series name and label the plugin exports (``vllm_advisor_engine_`` prefix).

Kept in the plugin package, not in ``advisor.names``, so the plugin imports nothing else
of the advisor; the advisor's reader (sources/) imports these constants from here.

Units: seconds and tokens; counters end in ``_total``; summaries carry ``quantile`` samples
over the plugin's sliding window plus cumulative ``_sum`` and ``_count``.
"""

from __future__ import annotations

PREFIX = "vllm_advisor_engine_"

# --- identity -------------------------------------------------------------------
PLUGIN_INFO = PREFIX + "plugin_info"
"""Gauge 1 with labels version, vllm_version, export, port, window_seconds, window_slots, prompt_buckets,
output_buckets, relative_accuracy: the plugin is loaded (and how it is set up)."""
WINDOW_SECONDS = PREFIX + "window_seconds"
"""Gauge: the sliding window the quantiles cover (seconds)."""

# --- per finished request, per length bucket (summaries) --------------------------
REQUEST_TTFT = PREFIX + "request_ttft_seconds"
REQUEST_TPOT = PREFIX + "request_tpot_seconds"
REQUEST_QUEUE = PREFIX + "request_queue_seconds"
REQUEST_PREFILL = PREFIX + "request_prefill_seconds"
REQUEST_E2E = PREFIX + "request_e2e_seconds"
ITL = PREFIX + "itl_seconds"
"""Summary of every inter-token latency (not split by length: vLLM reports ITLs per step
without the request they belong to)."""

REQUEST_TTFT_ESTIMATED = PREFIX + "request_ttft_estimated"
"""Counter: finished requests whose first token was not seen (the plugin loaded mid-request,
or parallel sampling's children sharing one arrival time): their TTFT is
e2e_latency - decode_time, which also counts the front-end's lag on the last token."""
REQUEST_PROMPT_TOKENS = PREFIX + "request_prompt_tokens"  # counter (+ _total)
REQUEST_GENERATION_TOKENS = PREFIX + "request_generation_tokens"  # counter
REQUEST_CACHED_TOKENS = PREFIX + "request_cached_tokens"  # counter
REQUEST_PREEMPTIONS = PREFIX + "request_preemptions"  # counter (vLLM >= 0.30)

# --- per engine step ----------------------------------------------------------------
STEPS = PREFIX + "steps"  # counter: engine steps whose scheduler stats reached this process
STEP_PREEMPTIONS = PREFIX + "step_preemptions"  # counter
STEP_RUNNING_REQUESTS = PREFIX + "step_running_requests"  # counter: running requests summed per step
STEP_WAITING_REQUESTS = PREFIX + "step_waiting_requests"  # counter: waiting requests summed per step

# The step-time fit: per timed step t (seconds), p (prefill tokens), d (decode tokens) and
# b (requests in the step), the running sums of the terms of the least-squares normal
# equations for t = a + b_d*d + c*p, by ``source``. Deltas over any window give the
# per-step fit over exactly the steps in that window.
FIT_STEPS = PREFIX + "fit_steps"  # n
FIT_SECONDS = PREFIX + "fit_seconds"  # sum t
FIT_PREFILL_TOKENS = PREFIX + "fit_prefill_tokens"  # sum p
FIT_DECODE_TOKENS = PREFIX + "fit_decode_tokens"  # sum d
FIT_REQUESTS = PREFIX + "fit_requests"  # sum b
FIT_SECONDS_SQUARED = PREFIX + "fit_seconds_squared"  # sum t*t
FIT_PREFILL_TOKENS_SQUARED = PREFIX + "fit_prefill_tokens_squared"  # sum p*p
FIT_DECODE_TOKENS_SQUARED = PREFIX + "fit_decode_tokens_squared"  # sum d*d
FIT_PREFILL_DECODE_TOKENS = PREFIX + "fit_prefill_decode_tokens"  # sum p*d
FIT_SECONDS_PREFILL_TOKENS = PREFIX + "fit_seconds_prefill_tokens"  # sum t*p
FIT_SECONDS_DECODE_TOKENS = PREFIX + "fit_seconds_decode_tokens"  # sum t*d

STEP_DURATION = PREFIX + "step_duration_seconds"
"""Summary of timed step durations by ``source``, ``phase`` and ``batch`` band."""

# --- labels -------------------------------------------------------------------------
ENGINE_LABEL = "engine"
PROMPT_BUCKET_LABEL = "prompt_bucket"
OUTPUT_BUCKET_LABEL = "output_bucket"
SOURCE_LABEL = "source"
PHASE_LABEL = "phase"
BATCH_LABEL = "batch"
QUANTILE_LABEL = "quantile"
ALL = "all"
"""The bucket label value of a series over every length."""

SOURCE_DETAILS = "iteration_details"
"""Step timed by the engine (SchedulerStats.iteration_details, vLLM >= 0.26 with
``--enable-logging-iteration-details``): exact scheduled prefill and decode tokens."""
SOURCE_FRONTEND = "frontend"
"""Step timed in the front-end as the interval between two steps' stats while the engine
had work; tokens from IterationStats (prefill attributed to the step that finished it)."""

PHASE_DECODE = "decode"
PHASE_MIXED = "mixed"
PHASE_PREFILL = "prefill"
PHASE_OTHER = "other"
"""A step with neither prefill nor decode tokens attributed (a middle prefill chunk seen
from the front-end)."""

QUANTILES = (0.5, 0.9, 0.95, 0.99)

SUMMARY_NAMES = (REQUEST_TTFT, REQUEST_TPOT, REQUEST_QUEUE, REQUEST_PREFILL, REQUEST_E2E, ITL, STEP_DURATION)
FIT_NAMES = (
    FIT_STEPS,
    FIT_SECONDS,
    FIT_PREFILL_TOKENS,
    FIT_DECODE_TOKENS,
    FIT_REQUESTS,
    FIT_SECONDS_SQUARED,
    FIT_PREFILL_TOKENS_SQUARED,
    FIT_DECODE_TOKENS_SQUARED,
    FIT_PREFILL_DECODE_TOKENS,
    FIT_SECONDS_PREFILL_TOKENS,
    FIT_SECONDS_DECODE_TOKENS,
)
COUNTER_NAMES = (
    REQUEST_TTFT_ESTIMATED,
    REQUEST_PROMPT_TOKENS,
    REQUEST_GENERATION_TOKENS,
    REQUEST_CACHED_TOKENS,
    REQUEST_PREEMPTIONS,
    STEPS,
    STEP_PREEMPTIONS,
    STEP_RUNNING_REQUESTS,
    STEP_WAITING_REQUESTS,
    *FIT_NAMES,
)
GAUGE_NAMES = (PLUGIN_INFO, WINDOW_SECONDS)
FAMILIES = frozenset((*SUMMARY_NAMES, *COUNTER_NAMES, *GAUGE_NAMES))
"""Every family the plugin exports (the advisor's page parser reads them all)."""
