"""Stand-ins for vLLM's stats objects, shaped like each version's (advisor/plugin/versions.py).

They replace ``SchedulerStats``, ``SchedulerIterationDetails``, ``IterationStats`` and
``FinishedRequestStats`` in the recorder's unit tests, which run without vLLM: each object
carries exactly the attributes the field table says that version has (plus the ones the
plugin ignores, left out). The real engine is exercised separately, in
tests/plugin/test_plugin_realvllm.py.
"""

from __future__ import annotations

import enum
from types import SimpleNamespace
from typing import Any

from advisor.plugin.versions import FIELDS, has_field


class FinishReason(enum.IntEnum):
    """Like vLLM's: an int enum whose str() is the lower-case name."""

    STOP = 0
    LENGTH = 1
    ABORT = 2
    ERROR = 3

    def __str__(self) -> str:
        return self.name.lower()


def _shaped(owner: str, version: str, values: dict[str, Any]) -> SimpleNamespace:
    """A namespace with the table's fields of ``owner`` that ``version`` has; a field the
    table does not list is kept (the caller passes only fields it means)."""
    listed = {f.name for f in FIELDS if f.owner == owner}
    kept = {k: v for k, v in values.items() if k not in listed or has_field(owner, k, version)}
    return SimpleNamespace(**kept)


def finished(
    version: str,
    prompt: int,
    output: int,
    e2e: float,
    ttft: float,
    queued: float = 0.01,
    prefill: float | None = None,
    preemptions: int = 0,
    cached: int = 0,
    reason: FinishReason = FinishReason.LENGTH,
    first_token_lag: float = 0.0,
) -> SimpleNamespace:
    """A finished request whose TTFT is ``ttft``: decode_time (engine clock) is e2e - ttft
    plus ``first_token_lag``, the front-end's extra lag on the first token over the last."""
    decode = e2e - ttft + first_token_lag
    return _shaped(
        "FinishedRequestStats",
        version,
        {
            "finish_reason": reason,
            "request_id": "r",
            "e2e_latency": e2e,
            "num_prompt_tokens": prompt,
            "num_generation_tokens": output,
            "max_tokens_param": output,
            "queued_time": queued,
            "prefill_time": ttft - queued if prefill is None else prefill,
            "inference_time": e2e - queued,
            "decode_time": decode,
            "mean_time_per_output_token": decode / (output - 1) if output > 1 else 0.0,
            "is_corrupted": False,
            "num_cached_tokens": cached,
            "num_preemptions": preemptions,
        },
    )


def iteration(
    version: str,
    generated: int = 0,
    first_tokens: int = 0,
    prompt_computed: int = 0,
    preempted: int = 0,
    itls: list[float] | None = None,
    finished_requests: list[SimpleNamespace] | None = None,
    stamp: float = 0.0,
    ttfts: list[float] | None = None,
) -> SimpleNamespace:
    """IterationStats of one step: ``stamp`` is its wall-clock iteration_timestamp, ``ttfts``
    the TTFTs of the requests whose first token it carries (else ``first_tokens`` of 0.1 s)."""
    prompt_stats = SimpleNamespace(computed=prompt_computed, total=prompt_computed, cached_tokens=0)
    return _shaped(
        "IterationStats",
        version,
        {
            "iteration_timestamp": stamp,
            "num_generation_tokens": generated,
            "prompt_token_stats": prompt_stats,
            "num_prompt_tokens": prompt_computed,
            "num_preempted_reqs": preempted,
            "finished_requests": list(finished_requests or []),
            "time_to_first_tokens_iter": list(ttfts) if ttfts is not None else [0.1] * first_tokens,
            "inter_token_latencies_iter": list(itls or []),
        },
    )


def details(
    version: str, ctx_tokens: int, gen_tokens: int, elapsed_ms: float, ctx_reqs: int = 1, gen_reqs: int = 0
) -> SimpleNamespace:
    return _shaped(
        "SchedulerIterationDetails",
        version,
        {
            "iteration_index": 0,
            "num_ctx_requests": ctx_reqs,
            "num_ctx_tokens": ctx_tokens,
            "num_generation_requests": gen_reqs,
            "num_generation_tokens": gen_tokens,
            "elapsed_ms": elapsed_ms,
            "is_dummy": False,
        },
    )


def scheduler(
    version: str, running: int, waiting: int = 0, iteration_details: SimpleNamespace | None = None
) -> SimpleNamespace:
    """SchedulerStats; ``iteration_details`` only where the version has the field (else the
    attribute is absent, as on 0.25)."""
    values: dict[str, Any] = {
        "num_running_reqs": running,
        "num_waiting_reqs": waiting,
        "kv_cache_usage": 0.5,
        "iteration_details": iteration_details,
    }
    return _shaped("SchedulerStats", version, values)
