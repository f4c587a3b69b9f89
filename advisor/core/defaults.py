"""vLLM's defaults for a knob, by vLLM version and hardware (:func:`default_for`). Pure but
for the optional, guarded read of an installed vLLM's ``EngineArgs`` defaults.

Defaults by version are data (:data:`DEFAULTS_TABLE`), researched from vLLM's sources:

- ``vllm/engine/arg_utils.py`` ``EngineArgs.get_batch_defaults`` (current) and its
  predecessors ``_set_default_args_v1`` / ``_set_default_args_v0``: per usage context
  (``UsageContext.OPENAI_API_SERVER`` for ``vllm serve``) and hardware. Today: a GPU with
  >= 70 GiB that is not an A100 gets max_num_batched_tokens 8192 / max_num_seqs 1024 for the
  API server (16384 / 1024 for the ``LLM`` class); other GPUs 2048 / 256 (8192 / 256 for
  ``LLM``); CPU 2048 x world_size / 128 x world_size (4096 / 256 for ``LLM``). Then
  ``_set_default_max_num_seqs_and_batched_tokens_args``: without chunked prefill the budget
  is raised to max(max_model_len, budget); the budget is capped at max_num_seqs *
  max_model_len; max_num_seqs is capped at the budget. The A100 exclusion came with
  vLLM PR #17885 (May 2025).
- V0 (the default engine before 0.8.0): ``_set_default_args_v0`` sets max_num_seqs 256;
  ``vllm/config.py`` ``SchedulerConfig.__post_init__`` sets max_num_batched_tokens to 2048
  with chunked prefill and max(max_model_len, 2048) without it; prefix caching off.
- ``vllm/config/cache.py`` ``CacheConfig.gpu_memory_utilization``: 0.9 for most of vLLM's
  history (docs of v0.6.4 and v0.8.1 say 0.9), ``Field(default=0.92)`` in v0.25.0, v0.30.0
  and v0.32.0 (our CPU capture's ``vllm:cache_config_info`` shows 0.92 too).

Facts that could not be pinned down (documented again in each row's ``note``):

- the exact release where gpu_memory_utilization went 0.9 -> 0.92 (some release in
  0.11 .. 0.25; we use 0.9 below 0.25 and say "unverified" in the detail for 0.11 .. 0.24);
- the exact 0.8.x/0.9.x patch that introduced the >= 70 GiB branch (we apply it from 0.9.0,
  the release that also carried the A100 exclusion);
- the release where the CPU branch (128 seqs) appeared (confirmed in 0.32.0; applied from
  0.9.0), and V0's chunked-prefill budget before 0.6 (512 in some 0.5.x releases).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from advisor.core.model import Provenanced

# --------------------------------------------------------------------------------------
# versions and hardware


def parse_version(version: str | None) -> tuple[int, int, int] | None:
    """``"0.32.0"``, ``"v0.10.1.1"``, ``"0.8.5.post1"``, ``"0.11.0rc2.dev12+g1a2b"`` -> (0, 32, 0).
    A dev build without tags (``"0.1.dev1+g1a2b"``) is an unknown version.

    None when ``version`` is empty or has no leading number (unknown version: callers then
    use the newest rules)."""
    if not version:
        return None
    if re.match(r"^\s*v?0\.1\.dev\d+", str(version)):
        return None  # setuptools-scm's fallback for a source build without tags, not vLLM 0.1
    m = re.match(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(version))
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0))


@dataclass(frozen=True)
class Hardware:
    """What a default depends on besides the version.

    device: ``"cpu"``, ``"gpu"`` (any accelerator vLLM treats as a GPU) or None (unknown).
    usage: ``"api_server"`` (``vllm serve``) or ``"llm_class"`` (offline ``LLM``).
    """

    device: str | None = None
    gpu_name: str | None = None
    gpu_memory_gib: float | None = None
    world_size: int = 1  # tensor_parallel_size * pipeline_parallel_size
    usage: str = "api_server"
    max_model_len: int | None = None
    enable_chunked_prefill: bool | None = None

    @property
    def is_cpu(self) -> bool:
        return (self.device or "").lower() == "cpu"

    @property
    def large_gpu(self) -> bool:
        """vLLM's ``device_memory >= 70 * GiB_bytes and "a100" not in device_name``."""
        if self.is_cpu or self.gpu_memory_gib is None:
            return False
        return self.gpu_memory_gib >= 70 and "a100" not in (self.gpu_name or "").lower()


Version = tuple[int, int, int]
V1_DEFAULT_SINCE: Version = (0, 8, 0)  # VLLM_USE_V1 on by default from 0.8.0
HW_BRANCH_SINCE: Version = (0, 9, 0)  # >= 70 GiB branch + A100 exclusion (PR #17885)
GMU_092_SINCE: Version = (0, 25, 0)  # earliest release confirmed with 0.92
GMU_UNVERIFIED_FROM: Version = (0, 11, 0)  # between this and GMU_092_SINCE: not pinned down
CPU_BLOCK_128_SINCE: Version = (0, 9, 0)  # CPU block_size 128: confirmed in 0.32.0 only
ASYNC_SCHEDULING_SINCE: Version = (0, 14, 0)  # async scheduling on by default (release notes, #27614)
FULL_DECODE_GRAPHS_SINCE: Version = (0, 11, 0)  # CUDA graphs FULL_AND_PIECEWISE by default (release notes)


@dataclass(frozen=True)
class DefaultRow:
    """One row of the defaults table: for ``knob``, from ``since`` (inclusive) until
    ``until`` (exclusive), where ``when(hw)`` holds, the default is ``value`` (or
    ``value(hw)`` when callable). ``note`` cites the upstream file."""

    knob: str
    since: Version | None
    until: Version | None
    when: Callable[[Hardware], bool]
    value: Any
    note: str


def _always(_hw: Hardware) -> bool:
    return True


def _cpu(hw: Hardware) -> bool:
    return hw.is_cpu


def _gpu(hw: Hardware) -> bool:
    return not hw.is_cpu


def _large_gpu(hw: Hardware) -> bool:
    return hw.large_gpu


def _api(hw: Hardware) -> bool:
    return hw.usage == "api_server"


def _v0_batched(hw: Hardware) -> int | None:
    if hw.enable_chunked_prefill:
        return 2048
    return max(hw.max_model_len, 2048) if hw.max_model_len else None


_ARG_UTILS = "vllm/engine/arg_utils.py"
DEFAULTS_TABLE: tuple[DefaultRow, ...] = (
    # ---- max_num_seqs
    DefaultRow(
        "max_num_seqs", None, V1_DEFAULT_SINCE, _always, 256, f"V0: {_ARG_UTILS} _set_default_args_v0"
    ),
    DefaultRow(
        "max_num_seqs",
        HW_BRANCH_SINCE,
        None,
        _cpu,
        lambda hw: (128 if hw.usage == "api_server" else 256) * max(1, hw.world_size),
        f"{_ARG_UTILS} get_batch_defaults (CPU, x world_size; 128 confirmed by a 0.32.0 capture)",
    ),
    DefaultRow(
        "max_num_seqs",
        HW_BRANCH_SINCE,
        None,
        _large_gpu,
        1024,
        f"{_ARG_UTILS} get_batch_defaults (GPU >= 70 GiB, not A100)",
    ),
    DefaultRow(
        "max_num_seqs", V1_DEFAULT_SINCE, None, _always, 256, f"{_ARG_UTILS} get_batch_defaults (other GPUs)"
    ),
    # ---- max_num_batched_tokens
    DefaultRow(
        "max_num_batched_tokens",
        None,
        V1_DEFAULT_SINCE,
        _always,
        _v0_batched,
        "V0: vllm/config.py SchedulerConfig.__post_init__ (2048 with chunked prefill, else max(max_model_len, 2048); 512 in some 0.5.x: not pinned)",
    ),
    DefaultRow(
        "max_num_batched_tokens",
        HW_BRANCH_SINCE,
        None,
        _cpu,
        lambda hw: (2048 if hw.usage == "api_server" else 4096) * max(1, hw.world_size),
        f"{_ARG_UTILS} get_batch_defaults (CPU, x world_size; 2048 confirmed by a 0.32.0 capture)",
    ),
    DefaultRow(
        "max_num_batched_tokens",
        HW_BRANCH_SINCE,
        None,
        _large_gpu,
        lambda hw: 8192 if hw.usage == "api_server" else 16384,
        f"{_ARG_UTILS} get_batch_defaults (GPU >= 70 GiB, not A100)",
    ),
    DefaultRow(
        "max_num_batched_tokens",
        V1_DEFAULT_SINCE,
        None,
        _always,
        lambda hw: 2048 if hw.usage == "api_server" else 8192,
        f"{_ARG_UTILS} get_batch_defaults / _set_default_args_v1 (other GPUs)",
    ),
    # ---- gpu_memory_utilization
    DefaultRow(
        "gpu_memory_utilization",
        None,
        GMU_UNVERIFIED_FROM,
        _always,
        0.9,
        "vllm/config.py CacheConfig / EngineArgs (docs v0.6.4, v0.8.1: 0.9)",
    ),
    DefaultRow(
        "gpu_memory_utilization",
        GMU_UNVERIFIED_FROM,
        GMU_092_SINCE,
        _always,
        0.9,
        "UNVERIFIED: 0.9 -> 0.92 happened in some release 0.11..0.25; exact release not pinned",
    ),
    DefaultRow(
        "gpu_memory_utilization",
        GMU_092_SINCE,
        None,
        _always,
        0.92,
        "vllm/config/cache.py CacheConfig Field(default=0.92) (v0.25.0, v0.30.0, v0.32.0)",
    ),
    # ---- chunked prefill and prefix caching
    DefaultRow(
        "enable_chunked_prefill",
        None,
        V1_DEFAULT_SINCE,
        _always,
        False,
        "V0: off (turned on automatically for max_model_len > 32K on GPU)",
    ),
    DefaultRow(
        "enable_chunked_prefill", V1_DEFAULT_SINCE, None, _always, True, f"V1: always on ({_ARG_UTILS})"
    ),
    DefaultRow("enable_prefix_caching", None, V1_DEFAULT_SINCE, _always, False, "V0: off"),
    DefaultRow("enable_prefix_caching", V1_DEFAULT_SINCE, None, _always, True, f"V1: on ({_ARG_UTILS})"),
    # ---- asynchronous scheduling (VllmConfig.__post_init__: None -> on unless incompatible; the
    # CPU platform turns it off, vllm/platforms/cpu.py of 0.32.0; pipeline parallelism too)
    DefaultRow(
        "async_scheduling",
        ASYNC_SCHEDULING_SINCE,
        None,
        _gpu,
        True,
        "on by default since 0.14.0 (vllm/config/vllm.py; 'Asynchronous scheduling is enabled.' in the log)",
    ),
    DefaultRow("async_scheduling", None, None, _always, False, "off: before 0.14.0, and on the CPU backend"),
    # ---- block size
    DefaultRow(
        "block_size",
        CPU_BLOCK_128_SINCE,
        None,
        _cpu,
        128,
        "CPU platform default (confirmed: cache_config_info of a 0.32.0 CPU server; release not pinned)",
    ),
    DefaultRow("block_size", None, None, _always, 16, "vllm/config/cache.py DEFAULT_BLOCK_SIZE 16"),
)

STATIC_DEFAULTS: dict[str, Any] = {
    "tensor_parallel_size": 1,
    "pipeline_parallel_size": 1,
    "data_parallel_size": 1,
    "kv_cache_dtype": "auto",
    "num_gpu_blocks_override": None,
    "kv_cache_memory_bytes": None,
    "api_server_count": 1,
    "mm_processor_cache_gb": 4.0,
    "mm_processor_cache_type": "lru",
    "enable_expert_parallel": False,
    "media_loading_thread_count": 8,  # vllm/envs.py VLLM_MEDIA_LOADING_THREAD_COUNT
    "mm_encoder_tp_mode": "weights",  # vllm/config/multimodal.py MultiModalConfig
    "swap_space": 4.0,
    # vllm/config/{scheduler,model}.py of 0.32.0
    "long_prefill_token_threshold": 0,
    "long_prefill_token_threshold_adaptive": False,
    "max_num_active_seqs": None,
    "watermark": 0.0,
    "max_num_queued_reqs": None,
    "max_num_queued_tokens": None,
    "enforce_eager": False,
    "max_cudagraph_capture_size": None,  # min(2 x max_num_seqs, 512), resolved at start-up
    "num_speculative_tokens": None,  # no speculative decoding
    "cpu_offload_gb": 0.0,
    "max_model_len": None,  # derived from the model's config at load time
    "replicas": 1,
}


def _in_range(v: Version | None, since: Version | None, until: Version | None) -> bool:
    if v is None:  # unknown version: the newest rules
        return until is None
    return (since is None or v >= since) and (until is None or v < until)


@functools.cache
def _installed_vllm() -> tuple[str | None, dict[str, Any]] | None:
    """An installed vLLM's version and its ``EngineArgs`` field defaults (None: vLLM is not
    importable). Looked up once per process: a failed import is not cached by Python, and its
    search of the path cost ~0.2 ms on every knob's default."""
    try:  # vLLM is an optional dependency (the `vllm` extra), imported only here
        import vllm
        from vllm.engine.arg_utils import EngineArgs

        return getattr(vllm, "__version__", None), {f.name: f.default for f in dataclasses.fields(EngineArgs)}
    except Exception:
        return None


def _installed_vllm_default(name: str, version: Version | None) -> tuple[Any, str] | None:
    """The field default of an installed vLLM's ``EngineArgs`` when it is importable, its
    version matches the one asked about (or none was asked) and the default is concrete
    (vLLM leaves several at None and resolves them at run time). Never raises."""
    found = _installed_vllm()
    if found is None:
        return None
    text, fields = found
    installed = parse_version(text)
    if version is not None and installed is not None and installed[:2] != version[:2]:
        return None
    default = fields.get(name, dataclasses.MISSING)
    if default is dataclasses.MISSING or default is None:
        return None
    return default, f"installed vllm {text or '?'} EngineArgs"


def default_for(name: str, version: str | None, hardware: Hardware | None = None) -> Provenanced:
    """vLLM's default for knob ``name`` under ``version`` and ``hardware``, source "default".

    Batch defaults follow vLLM's own post-processing: without chunked prefill the budget is
    at least max_model_len; the budget is capped at max_num_seqs * max_model_len and
    max_num_seqs at the budget. Value None means "decided at run time" (e.g. max_model_len)."""
    hw = hardware or Hardware()
    v = parse_version(version)
    vtxt = f"vLLM {version}" if version else "vLLM (version unknown: newest rules)"
    if name in ("max_num_seqs", "max_num_batched_tokens") and (v is None or v >= V1_DEFAULT_SINCE):
        seqs = _table_value("max_num_seqs", v, hw)
        budget = _table_value("max_num_batched_tokens", v, hw)
        assert seqs is not None and budget is not None
        s_val, s_note = seqs
        b_val, b_note = budget
        if hw.max_model_len:
            if hw.enable_chunked_prefill is False:
                b_val = max(hw.max_model_len, b_val)
            b_val = min(s_val * hw.max_model_len, b_val)
        s_val = min(s_val, b_val)
        val, note = (s_val, s_note) if name == "max_num_seqs" else (b_val, b_note)
        hwtxt = _hw_text(hw)
        return Provenanced(val, "default", f"{vtxt}, {hwtxt}: {note}")
    installed = _installed_vllm_default(name, v)
    if installed is not None:
        return Provenanced(installed[0], "default", installed[1])
    row = _table_value(name, v, hw)
    if row is not None:
        return Provenanced(row[0], "default", f"{vtxt}, {_hw_text(hw)}: {row[1]}")
    if name in STATIC_DEFAULTS:
        return Provenanced(STATIC_DEFAULTS[name], "default", f"{vtxt}: EngineArgs default")
    raise KeyError(f"unknown knob {name!r}")


def _table_value(name: str, v: Version | None, hw: Hardware) -> tuple[Any, str] | None:
    for row in DEFAULTS_TABLE:
        if row.knob == name and _in_range(v, row.since, row.until) and row.when(hw):
            value = row.value(hw) if callable(row.value) else row.value
            return value, row.note
    return None


def _hw_text(hw: Hardware) -> str:
    if hw.is_cpu:
        return f"CPU, {hw.usage}"
    if hw.device is None and hw.gpu_name is None:
        return f"hardware unknown (treated as a GPU < 70 GiB), {hw.usage}"
    mem = f" {hw.gpu_memory_gib:g} GiB" if hw.gpu_memory_gib is not None else ""
    return f"GPU {hw.gpu_name or '?'}{mem}, {hw.usage}"
