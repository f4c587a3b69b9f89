"""``vllm-advisor baseline save``: what the server runs with (redacted, with provenance) and a
summary of how it performs over a window, as one JSON document to compare against later."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from advisor import __version__
from advisor.core import jsonout

SUMMARY_SIGNALS = (
    "window_seconds",
    "requests_finished",
    "requests_per_second",
    "request_abort_ratio",
    "generation_tokens_per_second",
    "prompt_tokens_per_second",
    "preemptions",
    "preemptions_per_second",
    "ttft_seconds_p50",
    "ttft_seconds_p95",
    "ttft_seconds_p99",
    "itl_seconds_p50",
    "itl_seconds_p95",
    "itl_seconds_p99",
    "tpot_seconds_p50",
    "tpot_seconds_p95",
    "e2e_seconds_p50",
    "e2e_seconds_p95",
    "queue_seconds_p50",
    "queue_seconds_p95",
    "prompt_tokens_mean",
    "prompt_tokens_p50",
    "prompt_tokens_p95",
    "generation_tokens_mean",
    "generation_tokens_p50",
    "generation_tokens_p95",
    "kv_cache_usage_ratio_max",
    "requests_running_avg",
    "requests_waiting_avg",
)


class BaselineError(Exception):
    pass


def from_diagnosis(d: dict[str, Any], source: str) -> dict[str, Any]:
    eng = d.get("engine", {})
    sig = d.get("signals", {})
    return {
        "format": "vllm-advisor/baseline-v1",
        "saved_at": time.time(),
        "advisor_version": __version__,
        "source": source,
        "vllm_version": eng.get("vllm_version"),
        "model": eng.get("served_model_name") or eng.get("model"),
        "device": eng.get("device"),
        "gpus": eng.get("gpu_count"),
        "engine": eng,
        "summary": {k: sig.get(k) for k in SUMMARY_SIGNALS},
        "status": d.get("status"),
        "recommendation": d.get("recommendation"),
    }


def write(doc: dict[str, Any], path: str) -> None:
    Path(path).write_text(jsonout.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
