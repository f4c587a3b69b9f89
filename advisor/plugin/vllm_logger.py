"""The class vLLM loads from the ``vllm.stat_logger_plugins`` entry point.

vLLM requires a ``StatLoggerBase`` subclass and builds one per engine (data-parallel
rank) in each API-server process; every engine step it calls ``record`` with the step's
``SchedulerStats`` and ``IterationStats``. Nothing here may break serving: a failure is
logged once and the logger goes quiet.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

import vllm
from vllm.v1.metrics.loggers import StatLoggerBase

from advisor.plugin import exposition
from advisor.plugin.config import load_config
from advisor.plugin.recorder import EngineRecorder

log = exposition.log


def _versions() -> tuple[str, str]:
    vllm_version = str(getattr(vllm, "__version__", "") or "")
    try:
        own = version("vllm-advisor")
    except PackageNotFoundError:  # run from a source tree, not installed
        own = "unknown"
    return own, vllm_version


class AdvisorStatLogger(StatLoggerBase):
    """Per-engine stat logger that feeds the process's ``PluginExporter``."""

    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self._recorder: EngineRecorder | None = None
        try:
            config = load_config()
            for problem in config.problems:
                log.warning("vllm-advisor plugin: %s", problem)
            parallel = getattr(vllm_config, "parallel_config", None)
            api_count = int(getattr(parallel, "_api_process_count", 1) or 1)
            api_rank = int(getattr(parallel, "_api_process_rank", 0) or 0)
            own, vllm_version = _versions()
            info = {
                "version": own,
                "vllm_version": vllm_version,
                "window_seconds": f"{config.window_seconds:g}",
                "window_slots": str(config.window_slots),
                "prompt_buckets": ",".join(map(str, config.prompt_buckets)),
                "output_buckets": ",".join(map(str, config.output_buckets)),
                "relative_accuracy": f"{config.relative_accuracy:g}",
            }
            exporter = exposition.process_exporter(config, info, rank=api_rank)
            self._recorder = exporter.recorder(str(engine_index), frontend_timing=api_count <= 1)
        except Exception:
            log.exception("vllm-advisor plugin: could not start; vLLM runs on without it")

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        rec = self._recorder
        if rec is None:
            return
        try:
            rec.record(scheduler_stats, iteration_stats)
        except Exception:
            self._recorder = None
            log.exception("vllm-advisor plugin: recording failed; the plugin stops recording")

    def log_engine_initialized(self) -> None:
        """Nothing to log: the series speak for themselves."""

    def log(self) -> None:
        """vLLM's periodic log hook; the plugin writes no log lines."""
