"""The advisor's own settings: defaults, a YAML file, environment, flags (last wins).

Environment variables are ``VLLM_ADVISOR_<KEY>`` (upper case), e.g.
``VLLM_ADVISOR_VLLM_URL``, ``VLLM_ADVISOR_LISTEN``, ``VLLM_ADVISOR_INTERVAL``.
"""

from __future__ import annotations

import difflib
import importlib.resources
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from advisor.core import yamlsafe
from advisor.core.names import SEVERITIES
from advisor.core.units import parse_duration

# Prometheus's exporter range 9100-9999 has been fully allocated since 2023 (its "Default port
# allocations" wiki page), so any port there clashes with some exporter. 19842 lies outside it, below
# Linux's ephemeral range (32768+), and is not a registered well-known service.
DEFAULT_PORT = 19842
DEFAULT_TARGETS = {"ttft_p95_seconds": 2.0, "itl_p95_seconds": 0.1}


class ConfigError(Exception):
    """One or more problems with the settings: ``problems`` lists each, as a line that names
    the setting and where it came from; ``str()`` joins them for a one-line error."""

    def __init__(self, *problems: str) -> None:
        self.problems: tuple[str, ...] = problems or ("invalid settings",)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class Config:
    vllm_url: str = "http://127.0.0.1:8000"
    log_file: str | None = None
    log_cmd: str | None = None
    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    interval_s: float = 5.0
    scrape_timeout_s: float = 4.0
    engine_config: str | None = None  # the YAML `vllm serve --config` takes
    vllm_port: int | None = None  # find the vLLM process on this host by its port (default: from vllm_url)
    rules_dir: str | None = None
    state_dir: str = str(Path.home() / ".local" / "state" / "vllm-advisor")
    # diagnosis
    window_s: float = 120.0  # signals are computed over this much recent data
    retention_s: float = 900.0  # how much the window keeps (experiments compare before/after)
    min_window_s: float = 20.0  # less data than this: insufficient-data
    min_requests: int = 5  # fewer finished requests in the window, and nothing running: idle
    warmup_s: float = 30.0  # no advice this soon after an engine start
    observe_after_change_s: float = 300.0  # after a knob change, observe this long before new advice
    stale_after_s: float = 30.0  # advice older than this (no fresh data) is withdrawn
    experiment_max_wait_s: float = 1800.0  # judge an experiment after this long even if few requests came
    ledger_path: str | None = None  # default: STATE_DIR/ledger.sqlite
    targets: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_TARGETS))
    severity_overrides: dict[str, str] = field(default_factory=dict)
    host_gpus: int | None = None
    # desired replicas (advisor/predict/replicas.py, docs/autoscaling.md)
    replicas_headroom: float = 1.2  # the count must meet the targets at this times the observed load
    scale_in_hold_s: float = 300.0  # a lower count is desired only after being found enough this long

    def with_overrides(self, **kw: Any) -> Config:
        """These settings replaced (None: kept), each checked like a flag."""
        kw = {k: v for k, v in kw.items() if v is not None}
        return replace(self, **_coerce(kw))


_DURATIONS = {
    "interval_s",
    "scrape_timeout_s",
    "window_s",
    "retention_s",
    "min_window_s",
    "warmup_s",
    "observe_after_change_s",
    "stale_after_s",
    "experiment_max_wait_s",
    "scale_in_hold_s",
}
# durations that must be > 0 (the others may be 0: "no warm-up", "no wait")
_POSITIVE = {
    "interval_s",
    "scrape_timeout_s",
    "window_s",
    "retention_s",
    "stale_after_s",
    "experiment_max_wait_s",
}
_MIN_INTERVAL_S = 0.1
_MAX_DURATION_S = 30 * 86400.0
# what is absurd for each duration (a scrape an hour cannot follow vLLM; a window of days is a
# different tool): larger is refused, not accepted and run wrong
_MAX_S = {
    "interval_s": 3600.0,
    "scrape_timeout_s": 600.0,
    "window_s": 86400.0,
    "min_window_s": 86400.0,
    "warmup_s": 86400.0,
    "stale_after_s": 86400.0,
    "retention_s": 7 * 86400.0,
    "observe_after_change_s": 7 * 86400.0,
    "experiment_max_wait_s": _MAX_DURATION_S,
}
_OPTIONAL_STR = {"log_file", "log_cmd", "engine_config", "rules_dir", "ledger_path"}
_INTS = {"min_requests": (0, 10**9), "vllm_port": (1, 65535), "host_gpus": (0, 4096)}
_OPTIONAL_INT = {"vllm_port", "host_gpus"}
_FLOATS = {"replicas_headroom": (1.0, 10.0)}
MAX_CONFIG_BYTES = 1024 * 1024


def _what(v: Any) -> str:
    """A value as the operator wrote it, short."""
    if v is None:
        return "null (nothing)"
    if isinstance(v, bool):
        return f"the boolean {str(v).lower()}"
    if isinstance(v, int | float):
        return f"the number {v!r}"
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list | tuple):
        return "a list"
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _duration(key: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise ValueError(f"expected a duration (e.g. 5s, 500ms, 2m), got {_what(v)}")
    if isinstance(v, str) and v.strip().startswith("-"):
        raise ValueError(f"must be greater than 0 (e.g. 5s), got {_what(v)}")
    try:
        x = parse_duration(v)
    except (ValueError, OverflowError):
        raise ValueError(f"expected a duration (e.g. 5s, 500ms, 2m), got {_what(v)}") from None
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError(f"expected a finite duration, got {_what(v)}")
    if key in _POSITIVE and x <= 0:
        raise ValueError(f"must be greater than 0 (e.g. 5s), got {_what(v)}")
    if x < 0:
        raise ValueError(f"must not be negative, got {_what(v)}")
    if key == "interval_s" and x < _MIN_INTERVAL_S:
        raise ValueError(f"must be at least {_MIN_INTERVAL_S:g}s, got {_what(v)}")
    limit = _MAX_S.get(key, _MAX_DURATION_S)
    if x > limit:
        raise ValueError(f"must be at most {fmt_duration(limit)}, got {_what(v)}")
    return x


def fmt_duration(seconds: float) -> str:
    """``90`` -> ``90s``, ``120`` -> ``2m``, ``3600`` -> ``1h``, ``0.5`` -> ``500ms``."""
    for unit, n in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= n and (seconds / n).is_integer():
            return f"{seconds / n:g}{unit}"
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


def _integer(key: str, v: Any, from_text: bool) -> int | None:
    lo, hi = _INTS[key]
    if v is None and key in _OPTIONAL_INT:
        return None
    if from_text and isinstance(v, str) and v.strip().lstrip("+-").isdigit() and len(v) < 20:
        v = int(v.strip())
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"expected a whole number from {lo} to {hi}, got {_what(v)}")
    if not lo <= v <= hi:
        raise ValueError(f"expected a whole number from {lo} to {hi}, got {v}")
    return v


def _float(key: str, v: Any, from_text: bool) -> float:
    lo, hi = _FLOATS[key]
    if from_text and isinstance(v, str):
        try:
            v = float(v.strip())
        except ValueError:
            raise ValueError(f"expected a number from {lo:g} to {hi:g}, got {_what(v)}") from None
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        raise ValueError(f"expected a number from {lo:g} to {hi:g}, got {_what(v)}")
    if not lo <= float(v) <= hi:
        raise ValueError(f"expected a number from {lo:g} to {hi:g}, got {v!r}")
    return float(v)


def _text(key: str, v: Any, optional: bool) -> str | None:
    if v is None and optional:
        return None
    what = {
        "state_dir": "a directory path",
        "rules_dir": "a directory path",
        "log_file": "a file path",
        "engine_config": "a file path",
        "ledger_path": "a file path",
        "log_cmd": "a command line",
    }.get(key, "text")
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"expected {what}, got {_what(v) if v != '' else 'an empty value'}")
    if "\x00" in v:
        raise ValueError(f"expected {what}, got a value with a NUL byte")
    if key in ("state_dir", "rules_dir", "log_file", "engine_config", "ledger_path") and v.startswith("~"):
        # no shell expands it here: the daemon would write into a folder named "~" in its cwd
        raise ValueError(f"{_what(v)} starts with ~, which is not expanded here; write the full path")
    return v


def _url(v: Any) -> str:

    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8000, got {_what(v)}")
    try:
        parts = urlsplit(v.strip())
        _ = parts.port
    except ValueError as e:
        raise ValueError(
            f"expected an http(s) URL such as http://127.0.0.1:8000, got {_what(v)} ({e})"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http(s) URL such as http://127.0.0.1:8000, got {_what(v)}")
    return v.strip()


def _listen(v: Any) -> str:
    if not isinstance(v, str):
        hint = f' (quote it: "127.0.0.1:{v}")' if isinstance(v, int) and not isinstance(v, bool) else ""
        raise ValueError(f"expected HOST:PORT such as 127.0.0.1:{DEFAULT_PORT}, got {_what(v)}{hint}")
    parse_listen(v)  # raises ConfigError with the reason
    return v


TARGET_NAMES = tuple(DEFAULT_TARGETS)  # what a rule's `target:<name>` and the predictions read


def _entries(key: str, v: Any) -> tuple[dict[str, Any], list[tuple[Any, str]]]:
    """A ``targets`` or ``severity_overrides`` mapping checked entry by entry: the good
    entries, and (entry name, problem) for each bad one (all of them, not the first)."""
    if not isinstance(v, dict):
        raise ValueError(f"expected a mapping, got {_what(v)}")
    out: dict[str, Any] = {}
    found: list[tuple[Any, str]] = []
    for k, x in v.items():
        if not isinstance(k, str) or not k:
            found.append((k, f"expected names as keys, got {_what(k)}"))
            continue
        if key == "targets":
            if k not in TARGET_NAMES:
                near = difflib.get_close_matches(k, TARGET_NAMES, n=1, cutoff=0.85)
                hint = f"did you mean {near[0]}?" if near else f"known: {', '.join(TARGET_NAMES)}"
                found.append((k, f"{k}: unknown target ({hint})"))
            elif isinstance(x, bool) or not isinstance(x, int | float) or not (0 < float(x) < float("inf")):
                found.append((k, f"{k}: expected a number of seconds greater than 0, got {_what(x)}"))
            else:
                out[k] = float(x)
        elif x not in SEVERITIES:
            found.append((k, f"{k}: expected one of {', '.join(SEVERITIES)}, got {_what(x)}"))
        else:
            out[k] = x
    return out, found


def _mapping(key: str, v: Any) -> dict[str, Any]:
    out, found = _entries(key, v)
    if found:
        raise ValueError("; ".join(problem for _, problem in found))
    return out


def _value(key: str, v: Any, from_text: bool) -> Any:
    """One setting's value, checked; ValueError says what is expected."""
    if key in _DURATIONS:
        return _duration(key, v)
    if key in _INTS:
        return _integer(key, v, from_text)
    if key in _FLOATS:
        return _float(key, v, from_text)
    if key == "vllm_url":
        return _url(v)
    if key == "listen":
        return _listen(v)
    if key in ("targets", "severity_overrides"):
        return _mapping(key, v)
    return _text(key, v, key in _OPTIONAL_STR)


def _key(k: Any) -> str | None:
    """The Config field a setting name means (``interval`` -> ``interval_s``), or None."""
    if not isinstance(k, str):
        return None
    key = k.replace("-", "_")
    known = {f.name for f in fields(Config)}
    if key not in known and key + "_s" in _DURATIONS:
        key += "_s"
    return key if key in known else None


def _setting_names() -> str:
    return ", ".join(f.name.removesuffix("_s") if f.name in _DURATIONS else f.name for f in fields(Config))


def _coerce(
    d: dict[Any, Any],
    where: Any = None,
    from_text: bool = False,
    flag_names: bool = False,
    problems: list[str] | None = None,
    bad: set[str] | None = None,
    entry_where: Any = None,
) -> dict[str, Any]:
    """Check every setting: the good ones are returned; each bad one is a line naming the
    setting, where it came from and what is expected, appended to ``problems`` (ConfigError
    with all of them when ``problems`` is not given); a bad setting's name goes into ``bad``.
    ``where(key)`` says where a setting came from; ``entry_where(key, entry)`` where an entry
    of a mapping setting (``targets``, ``severity_overrides``) was (None: where its setting was)."""
    out: dict[str, Any] = {}
    found: list[str] = []
    for k, v in d.items():
        key = _key(k)
        origin = where(k) if where is not None else None
        prefix = f"{origin} " if origin else ""
        if key is None:
            shown = f"--{str(k).replace('_', '-')}" if flag_names else _what(k)
            names = _setting_names().split(", ")
            near = difflib.get_close_matches(str(k).replace("-", "_"), names, n=1, cutoff=0.8)
            hint = f"did you mean {near[0]}?" if near else f"known: {_setting_names()}"
            found.append(f"{prefix}{shown}: unknown setting ({hint})")
            continue
        shown = key.removesuffix("_s") if key in _DURATIONS else key
        name = f"--{shown.replace('_', '-')}" if flag_names else shown
        if key in ("targets", "severity_overrides") and isinstance(v, dict):
            # each entry checked on its own, named at its own line where it has one
            good, wrong = _entries(key, v)
            for entry, problem in wrong:
                at = entry_where(k, entry) if entry_where is not None else None
                found.append(f"{at + ' ' if at else prefix}{name}: {problem}")
            out[key] = good
            if wrong and bad is not None:
                bad.add(key)
            continue
        try:
            out[key] = _value(key, v, from_text)
        except (ValueError, ConfigError) as e:
            found.append(f"{prefix}{name}: {e}")
            if bad is not None:
                bad.add(key)
    if problems is None:
        if found:
            raise ConfigError(*found)
    else:
        problems.extend(found)
    return out


_NESTED = ("targets", "severity_overrides")  # mappings whose entries have lines of their own


def _entry_lines(path: str, key: Any, vnode: Any, loader: Any, problems: list[str]) -> dict[Any, int]:
    """The line of each entry of a nested mapping; an entry given twice is a problem (the YAML
    loader would keep the last one silently)."""
    lines: dict[Any, int] = {}
    if not isinstance(vnode, yaml.MappingNode):
        return lines
    for enode, _ in vnode.value:
        line = enode.start_mark.line + 1
        try:
            e = yamlsafe.construct(loader, enode)
            hash(e)
        except (yamlsafe.YamlError, TypeError):
            continue  # the value check names it
        if e in lines:
            problems.append(f"{path}:{line}: {key}: {e}: given twice (first at line {lines[e]})")
            continue
        lines[e] = line
    return lines


def _read_yaml(
    path: str, problems: list[str], entries: dict[tuple[Any, Any], int] | None = None
) -> tuple[dict[Any, Any], dict[Any, int]]:
    """The file's mapping and the line of each top-level key (core/yamlsafe.py: bounded in
    size, nesting, aliases and numbers); ``entries`` gets the line of each entry under
    ``targets:`` and ``severity_overrides:``. A file that cannot be read as a mapping is a
    ConfigError; a bad key or value in it is a line in ``problems`` and is left out."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        text = yamlsafe.decode(data, MAX_CONFIG_BYTES)
    except yamlsafe.YamlError as e:
        raise ConfigError(f"{path}: {e.problem}") from None
    try:
        node, loader = yamlsafe.compose(text)
    except yamlsafe.YamlError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    try:
        if node is None:
            return {}, {}
        if not isinstance(node, yaml.MappingNode):
            got = "a list" if isinstance(node, yaml.SequenceNode) else "a single value"
            raise ConfigError(f"{path}: must be a mapping of settings (setting: value), not {got}")
        lines: dict[Any, int] = {}
        raw: dict[Any, Any] = {}
        for knode, vnode in node.value:
            line = knode.start_mark.line + 1
            try:
                k = yamlsafe.construct(loader, knode)
                v = yamlsafe.construct(loader, vnode)
            except yamlsafe.YamlError as e:
                problems.append(f"{path}:{e.line or line}: {e.problem}")
                continue
            try:
                hash(k)
            except TypeError:  # an unhashable key
                problems.append(f"{path}:{line}: a setting name must be text")
                continue
            if k in raw:
                problems.append(f"{path}:{line}: {k}: given twice (first at line {lines[k]})")
                continue
            lines[k] = line
            raw[k] = v
            if isinstance(k, str) and k.replace("-", "_") in _NESTED:
                for entry, at in _entry_lines(path, k, vnode, loader, problems).items():
                    if entries is not None:
                        entries[(k, entry)] = at
    finally:
        loader.dispose()
    return raw, lines


def load(
    path: str | None = None,
    env: dict[str, str] | None = None,
    rule_ids: Callable[[str | None], Mapping[str, str] | None] | None = None,
    **flags: Any,
) -> Config:
    """Defaults, then the YAML file, then ``VLLM_ADVISOR_*`` environment, then flags. Every
    setting is checked; a bad one raises ConfigError naming it, where it came from and what
    is expected; all the problems found at once, one line each (ConfigError.problems).
    ``rule_ids(rules_dir)``: every rule id and former id (alias -> its id now) of the rules the
    settings load, to check ``severity_overrides`` against (None: the rules cannot be read;
    their own check says why)."""
    cfg = Config()
    raw: dict[Any, Any] = {}
    lines: dict[Any, int] = {}
    entries: dict[tuple[Any, Any], int] = {}
    problems: list[str] = []
    bad: set[str] = set()
    if path:
        raw, lines = _read_yaml(path, problems, entries)

        def entry_at(k: Any, e: Any) -> str | None:
            return f"{path}:{entries[(k, e)]}:" if (k, e) in entries else None

        good = _coerce(
            raw,
            where=lambda k: f"{path}:{lines.get(k, 1)}:",
            problems=problems,
            bad=bad,
            entry_where=entry_at,
        )
        cfg = replace(cfg, **good)
    environ = os.environ if env is None else env
    from_env: dict[str, str] = {}
    env_name: dict[str, str] = {}
    for f in fields(Config):
        for key in (f.name, f.name.removesuffix("_s")):
            name = "VLLM_ADVISOR_" + key.upper()
            v = environ.get(name)
            if v is not None and f.name not in ("targets", "severity_overrides"):
                from_env[f.name] = v
                env_name[f.name] = name
    problems.extend(_unknown_env_names(environ, set(env_name.values())))
    good_env = _coerce(
        from_env,
        where=lambda k: f"environment variable {env_name[k]}:",
        from_text=True,
        problems=problems,
        bad=bad,
    )
    cfg = replace(cfg, **good_env)
    flags = {k: v for k, v in flags.items() if v is not None}
    from_flags = _coerce(
        flags, where=lambda k: "flag", from_text=True, flag_names=True, problems=problems, bad=bad
    )
    cfg = replace(cfg, **from_flags)
    origin: dict[str, str] = {}
    if path:
        origin.update({_key(k) or "": f"{path}:{lines.get(k, 1)}" for k in raw})
    origin.update({k: f"environment variable {env_name[k]}" for k in from_env})
    origin.update({k: f"flag --{k.removesuffix('_s').replace('_', '-')}" for k in from_flags})
    try:  # a bad setting is left out of these: its default would make a contradiction up
        check_together(cfg, origin, skip=bad)
    except ConfigError as e:
        problems.extend(e.problems)
    if rule_ids is not None and cfg.severity_overrides:
        known = rule_ids(cfg.rules_dir)
        if known is not None:
            top = next((k for k in raw if _key(k) == "severity_overrides"), None)
            for rule in cfg.severity_overrides:
                at = entries.get((top, rule))
                where = f"{path}:{at}:" if at is not None else f"{origin.get('severity_overrides', 'flag')}:"
                problems.extend(_unknown_rule(where, rule, known))
    if problems:
        raise ConfigError(*problems)
    return cfg


def _unknown_rule(where: str, rule: str, known: Mapping[str, str]) -> list[str]:
    """A ``severity_overrides`` entry that names no rule: a line saying so (an override of a
    rule that does not exist would silently change nothing)."""
    now = known.get(rule)
    if now == rule:
        return []
    if now is not None:
        return [f"{where} severity_overrides: {rule}: a former id of rule {now}; write {now}"]
    ids = sorted({v for v in known.values()})
    near = difflib.get_close_matches(rule, ids, n=1, cutoff=0.8)
    hint = f"did you mean {near[0]}?" if near else f"known: {', '.join(ids)}"
    return [f"{where} severity_overrides: {rule}: no rule has this id ({hint})"]


# VLLM_ADVISOR_* variables read elsewhere: the stat-logger plugin's (advisor/plugin/config.py,
# in vLLM's environment) and the CLI's traceback switch
OTHER_ENV = frozenset(
    {
        "VLLM_ADVISOR_DEBUG",
        "VLLM_ADVISOR_PROMPT_BUCKETS",
        "VLLM_ADVISOR_OUTPUT_BUCKETS",
        "VLLM_ADVISOR_BATCH_BANDS",
        "VLLM_ADVISOR_WINDOW_SECONDS",
        "VLLM_ADVISOR_WINDOW_SLOTS",
        "VLLM_ADVISOR_RELATIVE_ACCURACY",
        "VLLM_ADVISOR_PLUGIN_EXPORT",
        "VLLM_ADVISOR_PLUGIN_HOST",
        "VLLM_ADVISOR_PLUGIN_PORT",
    }
)


def env_names() -> list[str]:
    """Every ``VLLM_ADVISOR_*`` name a setting is read from."""
    return sorted(
        {
            "VLLM_ADVISOR_" + key.upper()
            for f in fields(Config)
            if f.name not in ("targets", "severity_overrides")
            for key in (f.name, f.name.removesuffix("_s"))
        }
    )


def _unknown_env_names(environ: Any, used: set[str]) -> list[str]:
    """A ``VLLM_ADVISOR_*`` variable that no setting reads is a misspelling, not something to
    ignore silently: a line for each, naming it and the nearest known name."""
    known = set(env_names())
    found = []
    for name in sorted(k for k in environ if k.startswith("VLLM_ADVISOR_")):
        if name in known or name in OTHER_ENV or name in used:
            continue
        near = difflib.get_close_matches(name, sorted(known | OTHER_ENV), n=1, cutoff=0.8)
        hint = f"; did you mean {near[0]}?" if near else f" (known: {', '.join(sorted(known))})"
        found.append(f"environment variable {name}: unknown setting{hint}")
    return found


def check_together(cfg: Config, origin: dict[str, str] | None = None, skip: Collection[str] = ()) -> None:
    """Settings that contradict each other: ConfigError with a line for each pair, naming
    both, where each came from and what goes wrong. ``origin``: setting -> where it was given
    (default: the default)."""
    where = origin or {}
    found: list[str] = []

    def said(key: str) -> str:
        name = key.removesuffix("_s") if key in _DURATIONS else key
        return f"{name} {fmt_duration(getattr(cfg, key))} ({where.get(key, 'default')})"

    def both(a: str, b: str) -> bool:
        return a not in skip and b not in skip

    if cfg.interval_s > cfg.stale_after_s and both("interval_s", "stale_after_s"):
        found.append(
            f"{said('interval_s')} is longer than {said('stale_after_s')}: advice would be withdrawn as "
            "stale between two scrapes; shorten interval or raise stale_after"
        )
    if cfg.interval_s > cfg.window_s and both("interval_s", "window_s"):
        found.append(
            f"{said('interval_s')} is longer than {said('window_s')}: the window would never hold two "
            "scrapes; shorten interval or widen window"
        )
    if cfg.window_s < cfg.min_window_s and both("window_s", "min_window_s"):
        found.append(
            f"{said('window_s')} is shorter than {said('min_window_s')}: the window would never hold "
            "enough data, and every diagnosis would be insufficient data; widen window or lower "
            "min_window"
        )
    if cfg.retention_s < cfg.window_s and both("retention_s", "window_s"):
        found.append(
            f"{said('retention_s')} is shorter than {said('window_s')}: the window cannot be kept; "
            "raise retention to at least the window"
        )
    if found:
        raise ConfigError(*found)


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6); ConfigError when it is not."""
    if not isinstance(listen, str):
        raise ConfigError(f"expected HOST:PORT such as 127.0.0.1:{DEFAULT_PORT}, got {_what(listen)}")
    host, sep, port = listen.strip().rpartition(":")
    if not sep or not port.isdigit() or len(port) > 5:
        raise ConfigError(f"expected HOST:PORT such as 127.0.0.1:{DEFAULT_PORT}, got {_what(listen)}")
    if int(port) > 65535:
        raise ConfigError(f"port {int(port)} is out of range (0-65535) in {_what(listen)}")
    host = host.strip()
    if host.startswith("[") != host.endswith("]") or any(c.isspace() or c in "/?#@" for c in host):
        raise ConfigError(f"expected HOST:PORT such as 127.0.0.1:{DEFAULT_PORT}, got {_what(listen)}")
    return (host.strip("[]") or "127.0.0.1"), int(port)


def parse_duration_s(text: str | float) -> float:
    """``5s``, ``2m``, ``1h`` or a number of seconds; ConfigError on anything else."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise ConfigError(str(e)) from None


SAMPLE_CONFIG = "vllm-advisor.yaml"


def sample_text() -> str:
    """The commented sample config shipped in the package (``vllm-advisor config sample``)."""

    return (importlib.resources.files("advisor") / "data" / SAMPLE_CONFIG).read_text(encoding="utf-8")
