"""Every name the advisor reads or writes, in one place.

- vLLM's input metric families and their aliases across versions (V0 and V1,
  ``ray_vllm:`` prefixes, counters with or without ``_total``);
- the advisor's output series (``vllm_advisor_`` prefix, base units);
- label names, the rule-id pattern and alert names derived from rule ids.

vLLM drifts: when a metric is renamed upstream, add the old spelling to
``METRIC_ALIASES`` and nothing else changes.

The stat-logger plugin's series (``vllm_advisor_engine_*``, read when vLLM's page carries them)
are named in ``advisor/plugin/names.py``, the one place for them: the plugin imports nothing of
the advisor, and ``core`` and ``plugin`` are independent bottom layers, so the readers
(sources, derive, verify, drive) import them from there.
"""

from __future__ import annotations

import re

VLLM_PREFIX = "vllm:"
RAY_PREFIX = "ray_vllm:"
# Families kept besides vllm:*, so that a snapshot stays small in memory (canonical names).
KEEP_EXTRA = ("process_start_time_seconds", "process_cpu_seconds", "process_resident_memory_bytes")

# Canonical family names are the current V1 names, as prometheus_client's parser
# reports them: the `vllm:` prefix kept, a counter's `_total` suffix dropped
# (histograms keep their whole name, e.g. `vllm:iteration_tokens_total`).
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"  # a ratio 0..1 despite "perc"
CPU_KV_CACHE_USAGE = "vllm:cpu_cache_usage_perc"  # V0 only (swap space)
NUM_RUNNING = "vllm:num_requests_running"
NUM_WAITING = "vllm:num_requests_waiting"
NUM_WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
NUM_SWAPPED = "vllm:num_requests_swapped"  # V0 only
NUM_PREEMPTIONS = "vllm:num_preemptions"
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
REQUEST_SUCCESS = "vllm:request_success"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
MM_CACHE_QUERIES = "vllm:mm_cache_queries"
MM_CACHE_HITS = "vllm:mm_cache_hits"
CACHE_CONFIG_INFO = "vllm:cache_config_info"
TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
E2E = "vllm:e2e_request_latency_seconds"
QUEUE_TIME = "vllm:request_queue_time_seconds"
PREFILL_TIME = "vllm:request_prefill_time_seconds"
DECODE_TIME = "vllm:request_decode_time_seconds"
INFERENCE_TIME = "vllm:request_inference_time_seconds"
REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"
REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"
REQUEST_NUM_PREEMPTIONS = "vllm:request_num_preemptions"
ITERATION_TOKENS = "vllm:iteration_tokens_total"
# issue 31's levers (names and labels as vllm/v1/metrics/loggers.py and
# vllm/v1/spec_decode/metrics.py of 0.32.0 write them)
ADMISSION_REJECTIONS = "vllm:admission_rejections"  # 0.32+; labels model_name, reason
ADMISSION_REASON_LABEL = "reason"  # max_num_queued_reqs | max_num_queued_tokens
ADMISSION_BY_TOKENS = "max_num_queued_tokens"
SPEC_DECODE_DRAFTS = "vllm:spec_decode_num_drafts"
SPEC_DECODE_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
SPEC_DECODE_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
ENGINE_SLEEP_STATE = (
    "vllm:engine_sleep_state"  # gauge; label sleep_state: awake | weights_offloaded | discard_all
)
SLEEP_STATE_LABEL = "sleep_state"
AVG_PROMPT_THROUGHPUT = "vllm:avg_prompt_throughput_toks_per_s"  # V0 gauges
AVG_GENERATION_THROUGHPUT = "vllm:avg_generation_throughput_toks_per_s"

# old spelling -> canonical spelling (after the prefix and `_total` are normalised)
METRIC_ALIASES: dict[str, str] = {
    "vllm:gpu_cache_usage_perc": KV_CACHE_USAGE,
    "vllm:time_per_output_token_seconds": ITL,
    "vllm:gpu_prefix_cache_queries": PREFIX_CACHE_QUERIES,
    "vllm:gpu_prefix_cache_hits": PREFIX_CACHE_HITS,
    "vllm:gpu_prefix_cache_hit_rate": "vllm:prefix_cache_hit_rate",
    "vllm:cpu_prefix_cache_hit_rate": "vllm:cpu_prefix_cache_hit_rate",
    "vllm:num_preemptions_total": NUM_PREEMPTIONS,
}

# Families only V0 engines exported (as spelled on the page): their presence, without any
# V1-only name, dates a page whose version is unknown to V0 (see sources.engine.era_of).
V0_ONLY_FAMILIES = frozenset(
    {
        "vllm:gpu_cache_usage_perc",
        "vllm:cpu_cache_usage_perc",
        "vllm:num_requests_swapped",
        "vllm:avg_prompt_throughput_toks_per_s",
        "vllm:avg_generation_throughput_toks_per_s",
        "vllm:time_per_output_token_seconds",
        "vllm:gpu_prefix_cache_hit_rate",
        "vllm:cpu_prefix_cache_hit_rate",
    }
)

# Every family the advisor reads (canonical names). Nothing else on a page is parsed beyond
# its name: an unknown family (a LoRA info gauge whose labels change with the load, another
# exporter's series under `vllm:`) is dropped before its labels are read, and counted.
READ_FAMILIES = frozenset(
    {
        KV_CACHE_USAGE,
        CPU_KV_CACHE_USAGE,
        NUM_RUNNING,
        NUM_WAITING,
        NUM_WAITING_BY_REASON,
        NUM_SWAPPED,
        NUM_PREEMPTIONS,
        PROMPT_TOKENS,
        GENERATION_TOKENS,
        REQUEST_SUCCESS,
        PREFIX_CACHE_QUERIES,
        PREFIX_CACHE_HITS,
        MM_CACHE_QUERIES,
        MM_CACHE_HITS,
        CACHE_CONFIG_INFO,
        TTFT,
        ITL,
        TPOT,
        E2E,
        QUEUE_TIME,
        PREFILL_TIME,
        DECODE_TIME,
        INFERENCE_TIME,
        REQUEST_PROMPT_TOKENS,
        REQUEST_GENERATION_TOKENS,
        REQUEST_NUM_PREEMPTIONS,
        ITERATION_TOKENS,
        AVG_PROMPT_THROUGHPUT,
        AVG_GENERATION_THROUGHPUT,
        ADMISSION_REJECTIONS,
        SPEC_DECODE_DRAFTS,
        SPEC_DECODE_DRAFT_TOKENS,
        SPEC_DECODE_ACCEPTED_TOKENS,
        ENGINE_SLEEP_STATE,
        *METRIC_ALIASES.values(),
        *KEEP_EXTRA,
    }
)
# Read families that are counters (never go down without a restart), whatever the page's TYPE
# lines say (Ray's exporter has none).
COUNTERS = frozenset(
    {
        NUM_PREEMPTIONS,
        PROMPT_TOKENS,
        GENERATION_TOKENS,
        REQUEST_SUCCESS,
        PREFIX_CACHE_QUERIES,
        PREFIX_CACHE_HITS,
        MM_CACHE_QUERIES,
        MM_CACHE_HITS,
        ADMISSION_REJECTIONS,
        SPEC_DECODE_DRAFTS,
        SPEC_DECODE_DRAFT_TOKENS,
        SPEC_DECODE_ACCEPTED_TOKENS,
        "process_cpu_seconds",
    }
)


def _read_spellings() -> frozenset[str]:
    """Every sample or family name, as a page may spell it, of a family the advisor reads."""
    canon = set(READ_FAMILIES)
    bases = canon | {old for old, new in METRIC_ALIASES.items() if new in canon}
    out: set[str] = set()
    for base in bases:
        for b in (base, RAY_PREFIX + base[len(VLLM_PREFIX) :]) if base.startswith(VLLM_PREFIX) else (base,):
            out.update(b + sfx for sfx in ("", "_total", "_bucket", "_count", "_sum"))
    return frozenset(out)


READ_SPELLINGS = _read_spellings()


# Families whose samples are ratios / levels: aggregated across engines by mean.
MEAN_AGGREGATED = frozenset({KV_CACHE_USAGE, CPU_KV_CACHE_USAGE, "vllm:prefix_cache_hit_rate"})

# Labels that identify a series' origin and are kept through parsing.
ENGINE_LABEL = "engine"
MODEL_LABEL = "model_name"
# other spellings of those labels -> the canonical one (Triton's vLLM backend says `model`)
LABEL_ALIASES: dict[str, str] = {"model": MODEL_LABEL}

# --- the advisor's own series -------------------------------------------------
OUTPUT_PREFIX = "vllm_advisor_"

RULE_ID_RE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
SEVERITIES = ("critical", "warning", "info")  # a rule's and an alert's severity label
SIGNAL_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def canonical_family(name: str, mtype: str | None = None) -> str:
    """Normalise a family name as read from any vLLM version to its canonical name.

    ``ray_vllm:x`` -> ``vllm:x``; a counter's trailing ``_total`` is dropped (the
    parser already does so when the page declares its TYPE; untyped pages keep it);
    then the alias table maps renamed metrics to their current name.
    """
    if name.startswith(RAY_PREFIX):
        name = VLLM_PREFIX + name[len(RAY_PREFIX) :]
    if (
        mtype in (None, "counter", "unknown", "untyped")
        and name.endswith("_total")
        and name != ITERATION_TOKENS
    ):
        name = name[: -len("_total")]
    return METRIC_ALIASES.get(name, name)


def output_name(signal_or_suffix: str) -> str:
    """The advisor's exported series name for a signal or a suffix."""
    return OUTPUT_PREFIX + signal_or_suffix


def alert_name(rule_id: str) -> str:
    """The advice alert (the advisor's recommendation): ``kv-cache-preemption`` ->
    ``VllmAdvisorKvCachePreemption``."""
    return "VllmAdvisor" + "".join(part.capitalize() for part in rule_id.split("-"))


def symptom_alert_name(rule_id: str) -> str:
    """The symptom alert (the rule's conditions in PromQL): ``kv-cache-preemption`` ->
    ``VllmKvCachePreemption``."""
    return "Vllm" + "".join(part.capitalize() for part in rule_id.split("-"))


def runbook_anchor(rule_id: str) -> str:
    return rule_id
