"""vLLM stat-logger plugin: exact per-length latency quantiles and per-step records.

vLLM loads ``advisor.plugin.vllm_logger:AdvisorStatLogger`` from the entry-point group
``vllm.stat_logger_plugins`` inside its API-server (front-end) process, when the
``vllm-advisor[plugin]`` extra is installed in the vLLM environment (docs/plugin.md).

Only ``vllm_logger`` imports vLLM; the rest (config, sketch, recorder, exposition) runs
without it, so the recorder is unit-tested in the advisor's own venv. Nothing here imports
the rest of ``advisor``: this code runs inside vLLM's process and must stay light.
"""

from __future__ import annotations

PLUGIN_NAME = "vllm_advisor"
"""The entry point's name (what ``VLLM_PLUGINS`` lists to allow it)."""
