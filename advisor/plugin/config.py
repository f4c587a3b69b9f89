"""The plugin's settings, from environment variables (vLLM gives a plugin no arguments).

A bad value never stops vLLM: it is reported in ``problems`` (logged once by the logger)
and the default is used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

ENV_PROMPT_BUCKETS = "VLLM_ADVISOR_PROMPT_BUCKETS"
ENV_OUTPUT_BUCKETS = "VLLM_ADVISOR_OUTPUT_BUCKETS"
ENV_BATCH_BANDS = "VLLM_ADVISOR_BATCH_BANDS"
ENV_WINDOW_SECONDS = "VLLM_ADVISOR_WINDOW_SECONDS"
ENV_WINDOW_SLOTS = "VLLM_ADVISOR_WINDOW_SLOTS"
ENV_RELATIVE_ACCURACY = "VLLM_ADVISOR_RELATIVE_ACCURACY"
ENV_EXPORT = "VLLM_ADVISOR_PLUGIN_EXPORT"
ENV_HOST = "VLLM_ADVISOR_PLUGIN_HOST"
ENV_PORT = "VLLM_ADVISOR_PLUGIN_PORT"
ENV_MULTIPROC = "PROMETHEUS_MULTIPROC_DIR"

DEFAULT_PROMPT_BUCKETS = (512, 2048, 8192)
DEFAULT_OUTPUT_BUCKETS = (128, 512, 2048)
DEFAULT_BATCH_BANDS = (1, 4, 16, 64, 256)
DEFAULT_WINDOW_SECONDS = 60.0
DEFAULT_WINDOW_SLOTS = 6
DEFAULT_RELATIVE_ACCURACY = 0.01
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 19843  # beside the advisor's own 19842, outside Prometheus's allocated 9100-9999
EXPORT_MODES = ("auto", "registry", "port")


@dataclass(frozen=True)
class PluginConfig:
    """Bucket edges are inclusive upper bounds in tokens (``512`` makes ``0-512`` and
    ``513-...``); the window is ``window_slots`` rotating sketches of
    ``window_seconds / window_slots`` seconds each."""

    prompt_buckets: tuple[int, ...] = DEFAULT_PROMPT_BUCKETS
    output_buckets: tuple[int, ...] = DEFAULT_OUTPUT_BUCKETS
    batch_bands: tuple[int, ...] = DEFAULT_BATCH_BANDS
    window_seconds: float = DEFAULT_WINDOW_SECONDS
    window_slots: int = DEFAULT_WINDOW_SLOTS
    relative_accuracy: float = DEFAULT_RELATIVE_ACCURACY
    export: str = "auto"
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    multiprocess: bool = False
    """PROMETHEUS_MULTIPROC_DIR is set in this process (vLLM does so for --api-server-count > 1)."""
    problems: tuple[str, ...] = field(default=(), compare=False)

    @property
    def slot_seconds(self) -> float:
        return self.window_seconds / self.window_slots

    def resolved_export(self) -> str:
        """``registry`` or ``port``: ``auto`` is the registry unless vLLM serves /metrics
        from prometheus_client's multiprocess files, where a collector cannot appear."""
        if self.export == "auto":
            return "port" if self.multiprocess else "registry"
        return self.export


def _edges(raw: str | None, default: tuple[int, ...], name: str, problems: list[str]) -> tuple[int, ...]:
    if raw is None or not raw.strip():
        return default
    try:
        edges = tuple(int(x) for x in raw.replace(" ", "").split(",") if x)
    except ValueError:
        problems.append(f"{name}={raw!r} is not a comma-separated list of integers; using the default")
        return default
    if not edges or any(e <= 0 for e in edges) or list(edges) != sorted(set(edges)):
        problems.append(f"{name}={raw!r} must be increasing positive integers; using the default")
        return default
    return edges


def _number(raw: str | None, default: float, name: str, lo: float, hi: float, problems: list[str]) -> float:
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        problems.append(f"{name}={raw!r} is not a number; using {default}")
        return default
    if not lo <= value <= hi:
        problems.append(f"{name}={raw!r} is outside [{lo}, {hi}]; using {default}")
        return default
    return value


def load_config(env: Mapping[str, str] | None = None) -> PluginConfig:
    """Read the settings from ``env`` (``os.environ`` by default)."""
    env = os.environ if env is None else env
    problems: list[str] = []
    export = (env.get(ENV_EXPORT) or "auto").strip().lower()
    if export not in EXPORT_MODES:
        problems.append(f"{ENV_EXPORT}={export!r} is not one of {', '.join(EXPORT_MODES)}; using auto")
        export = "auto"
    return PluginConfig(
        prompt_buckets=_edges(
            env.get(ENV_PROMPT_BUCKETS), DEFAULT_PROMPT_BUCKETS, ENV_PROMPT_BUCKETS, problems
        ),
        output_buckets=_edges(
            env.get(ENV_OUTPUT_BUCKETS), DEFAULT_OUTPUT_BUCKETS, ENV_OUTPUT_BUCKETS, problems
        ),
        batch_bands=_edges(env.get(ENV_BATCH_BANDS), DEFAULT_BATCH_BANDS, ENV_BATCH_BANDS, problems),
        window_seconds=_number(
            env.get(ENV_WINDOW_SECONDS), DEFAULT_WINDOW_SECONDS, ENV_WINDOW_SECONDS, 1.0, 86400.0, problems
        ),
        window_slots=int(
            _number(env.get(ENV_WINDOW_SLOTS), DEFAULT_WINDOW_SLOTS, ENV_WINDOW_SLOTS, 1, 600, problems)
        ),
        relative_accuracy=_number(
            env.get(ENV_RELATIVE_ACCURACY),
            DEFAULT_RELATIVE_ACCURACY,
            ENV_RELATIVE_ACCURACY,
            0.0001,
            0.2,
            problems,
        ),
        export=export,
        host=(env.get(ENV_HOST) or DEFAULT_HOST).strip(),
        port=int(_number(env.get(ENV_PORT), DEFAULT_PORT, ENV_PORT, 1, 65535, problems)),
        multiprocess=bool(env.get(ENV_MULTIPROC)),
        problems=tuple(problems),
    )


def bucket_labels(edges: tuple[int, ...]) -> tuple[str, ...]:
    """``(512, 2048)`` -> ``("0-512", "513-2048", "2049+")``."""
    labels = []
    lo = 0
    for e in edges:
        labels.append(f"{lo}-{e}")
        lo = e + 1
    labels.append(f"{lo}+")
    return tuple(labels)
