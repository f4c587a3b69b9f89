"""Which vLLM versions load the plugin and which stats fields each one hands it.

vLLM says ``SchedulerStats`` and ``IterationStats`` are not a stable interface, so the
recorder reads every field with ``getattr`` and a default, and a field a version lacks
means the series built from it is not exported (never a zero). This table records what
the released wheels contain (read from ``vllm/v1/metrics/stats.py``, ``loggers.py``,
``plugins/__init__.py`` and ``v1/engine/core.py`` of each wheel; docs/plugin.md has the
same table in prose); the unit tests build stand-in stats objects from it, one shape per
version.
"""

from __future__ import annotations

from dataclasses import dataclass

VERSIONS_CHECKED: tuple[str, ...] = (
    "0.25.0",
    "0.26.0",
    "0.27.1",
    "0.28.0",
    "0.29.0",
    "0.30.0",
    "0.31.0",
    "0.32.0",
    "0.33.0",
)
"""Every one loads the ``vllm.stat_logger_plugins`` group in ``AsyncLLM`` (the front-end of
``vllm serve``), requires a ``StatLoggerBase`` subclass, and calls
``record(scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0)``."""


@dataclass(frozen=True)
class Field:
    """One attribute the recorder reads: the class it lives on, the first checked version
    that has it (``None``: every checked version), and what the plugin builds from it."""

    owner: str
    name: str
    since: str | None
    used_for: str
    note: str = ""


FIELDS: tuple[Field, ...] = (
    Field("SchedulerStats", "num_running_reqs", None, "step_running_requests; batch band; busy test"),
    Field("SchedulerStats", "num_waiting_reqs", None, "step_waiting_requests; busy test"),
    Field(
        "SchedulerStats",
        "iteration_details",
        "0.26.0",
        "fit_* and step_duration_seconds with source=iteration_details",
        "set only with --enable-logging-iteration-details (which also logs one line per step)",
    ),
    Field("SchedulerIterationDetails", "num_ctx_tokens", "0.26.0", "prefill tokens p of the step"),
    Field("SchedulerIterationDetails", "num_ctx_requests", "0.26.0", "requests b of the step"),
    Field("SchedulerIterationDetails", "num_generation_tokens", "0.26.0", "decode tokens d of the step"),
    Field("SchedulerIterationDetails", "num_generation_requests", "0.26.0", "requests b of the step"),
    Field("SchedulerIterationDetails", "elapsed_ms", "0.26.0", "step time t (waiting on the model output)"),
    Field("SchedulerIterationDetails", "is_dummy", "0.26.0", "data-parallel dummy steps are skipped"),
    Field("IterationStats", "num_generation_tokens", None, "decode tokens d (source=frontend)"),
    Field("IterationStats", "prompt_token_stats", None, "computed prefill tokens p (source=frontend)"),
    Field("IterationStats", "num_preempted_reqs", None, "step_preemptions_total"),
    Field(
        "IterationStats",
        "time_to_first_tokens_iter",
        None,
        "request_ttft_seconds (matched to the finished request by arrival time); first tokens, subtracted from d",
    ),
    Field(
        "IterationStats",
        "iteration_timestamp",
        None,
        "arrival time = stamp - TTFT = stamp - e2e_latency: matches a first token to its request",
    ),
    Field("IterationStats", "inter_token_latencies_iter", None, "itl_seconds"),
    Field("IterationStats", "finished_requests", None, "every request_* series"),
    Field("FinishedRequestStats", "finish_reason", None, "aborted and failed requests are left out"),
    Field("FinishedRequestStats", "num_prompt_tokens", None, "prompt bucket; request_prompt_tokens_total"),
    Field(
        "FinishedRequestStats",
        "num_generation_tokens",
        None,
        "output bucket; request_generation_tokens_total",
    ),
    Field(
        "FinishedRequestStats", "e2e_latency", None, "request_e2e_seconds; its arrival time finds its TTFT"
    ),
    Field(
        "FinishedRequestStats",
        "decode_time",
        None,
        "fallback request_ttft_seconds = e2e_latency - decode_time when the first token was not seen",
    ),
    Field("FinishedRequestStats", "queued_time", None, "request_queue_seconds"),
    Field("FinishedRequestStats", "prefill_time", None, "request_prefill_seconds"),
    Field("FinishedRequestStats", "mean_time_per_output_token", None, "request_tpot_seconds"),
    Field("FinishedRequestStats", "num_cached_tokens", None, "request_cached_tokens_total"),
    Field("FinishedRequestStats", "num_preemptions", "0.30.0", "request_preemptions_total"),
)


def _key(version: str) -> tuple[int, ...]:
    out = []
    for part in version.split("+")[0].split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def has_field(owner: str, name: str, version: str) -> bool:
    """Whether ``owner.name`` exists in vLLM ``version`` according to the table (a version
    older than every checked one is assumed to have only the fields present in all)."""
    for f in FIELDS:
        if f.owner == owner and f.name == name:
            return f.since is None or _key(version) >= _key(f.since)
    raise KeyError(f"{owner}.{name} is not in the plugin's field table")


def fields_of(owner: str, version: str) -> list[str]:
    """The table's fields of ``owner`` that ``version`` has (for the per-version stand-ins)."""
    return [f.name for f in FIELDS if f.owner == owner and has_field(owner, f.name, version)]


def loading(version: str | None) -> str:
    """Whether vLLM ``version`` loads the plugin, from the checked range: ``checked`` (it is
    one of VERSIONS_CHECKED or between them), ``older`` (before the first checked version: the
    entry-point group may not exist there), ``newer`` (after the last: expected, not checked),
    ``unknown`` (no version)."""
    if not version:
        return "unknown"
    v = _key(version)
    if v < _key(VERSIONS_CHECKED[0]):
        return "older"
    if v[:2] > _key(VERSIONS_CHECKED[-1])[:2]:
        return "newer"
    return "checked"
