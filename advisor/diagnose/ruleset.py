"""Load and validate the symptom table: ``rules/*.yaml`` (format ``advisor/v1``).

Validation reports every error at once, each with ``file:line``. The rule format
is documented in ``rules/README.md``.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from advisor.core import names, yamlsafe
from advisor.core.knobs import KNOBS
from advisor.core.names import SEVERITIES
from advisor.core.units import parse_duration
from advisor.derive.signals import CATALOG

FORMAT = "advisor/v1"
OPS = (">", ">=", "<", "<=", "==", "!=")
DIRECTIONS = ("increase", "decrease", "set", "enable", "disable")
DOC_SECTIONS = ("what", "why", "expect", "verify", "rollback", "evidence", "references")
STEP_RE = re.compile(r"^(?:[+-]\d+(?:\.\d+)?%|[x/]\d+(?:\.\d+)?|[+-]\d+(?:\.\d+)?|=\S+)$")


class RuleError(Exception):
    """Invalid rules: ``errors`` holds every problem as ``file:line: message``."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class Condition:
    signal: str
    op: str
    value: float | str  # a number, or "target:<name>" (from the advisor's config)

    def describe(self) -> str:
        return f"{self.signal} {self.op} {self.value}"


@dataclass(frozen=True)
class KnobChoice:
    name: str
    direction: str
    step: str | None = None  # "-25%", "x2", "/2", "+0.05", "=0", "=shm"
    bound_signal: str | None = None  # grounds the proposed value (e.g. kv_sustained_concurrency)
    note: str = ""
    unless: tuple[Condition, ...] = ()  # skip this knob when one of these holds (unknown: no skip)


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    severity: str
    priority: int
    when: tuple[Condition, ...]
    for_s: float
    gate: tuple[Condition, ...]
    knobs: tuple[KnobChoice, ...]
    explain: dict[str, Any]
    examples: dict[str, list[dict[str, Any]]]
    path: str = ""
    aliases: tuple[str, ...] = ()
    category: str = ""

    @property
    def alert(self) -> str:
        return names.alert_name(self.id)

    def signals(self) -> set[str]:
        out = {c.signal for c in self.when} | {c.signal for c in self.gate}
        out |= {k.bound_signal for k in self.knobs if k.bound_signal}
        out |= {c.signal for k in self.knobs for c in k.unless}
        out |= set(self.explain.get("verify", [])) | set(self.explain.get("evidence", []))
        return out


def default_rules_dir() -> Path:
    """``rules/`` of a source checkout, else the copy packed into the wheel."""
    package = Path(str(importlib.resources.files("advisor")))
    checkout = package.parent / "rules"
    if checkout.is_dir():
        return checkout
    return package / "_rules"


# ------------------------------------------------------------------ loading
class _LineLoader(yamlsafe.SafeLoader):
    """The bounded safe loader (core/yamlsafe.py) that remembers the line of every mapping
    key (``__lines__``)."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[str, Any]:
    mapping: dict[str, Any] = {str(k): v for k, v in loader.construct_mapping(node, deep=True).items()}
    lines = {}
    for key_node, _ in node.value:
        lines[str(key_node.value)] = key_node.start_mark.line + 1
    mapping["__line__"] = node.start_mark.line + 1
    mapping["__lines__"] = lines
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


MAX_RULE_NODES = yamlsafe.MAX_NODES  # a rule file is a few hundred nodes; aliases must not multiply them
MAX_RULE_BYTES = yamlsafe.MAX_BYTES


def _load_yaml(text: str) -> Any:
    """The document with line numbers (_LineLoader), refusing alias bombs, deep nesting and
    numbers beyond 64 bits (core/yamlsafe.py)."""
    return yamlsafe.loads(text, _LineLoader, max_nodes=MAX_RULE_NODES)


def _known(value: Any, names: Iterable[str]) -> bool:
    """``value`` is one of ``names`` (False, not TypeError, for a list or a mapping)."""
    return isinstance(value, str) and value in names


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in ("__line__", "__lines__")}
    if isinstance(obj, list):
        return [_strip(x) for x in obj]
    return obj


def load_rules(
    directory: str | Path | None = None,
    known_signals: Iterable[str] | None = None,
    known_knobs: Iterable[str] | None = None,
) -> list[Rule]:
    """Load every ``*.yaml`` in ``directory``; raise :class:`RuleError` with all problems."""
    d = Path(directory) if directory else default_rules_dir()
    if not d.is_dir():
        raise RuleError([f"{d}: not a directory"])
    if known_signals is None:
        known_signals = CATALOG.keys()
    if known_knobs is None:
        try:
            known_knobs = KNOBS.keys()
        except ImportError:  # pragma: no cover - knobs is part of the package
            known_knobs = None
    sigs, kns = set(known_signals), set(known_knobs) if known_knobs is not None else None
    errors: list[str] = []
    rules: list[Rule] = []
    files = sorted(p for p in d.glob("*.yaml"))
    if not files:
        errors.append(f"{d}: no rule files (*.yaml)")
    for p in files:
        rule = _load_one(p, sigs, kns, errors)
        if rule is not None:
            rules.append(rule)
    seen: dict[str, str] = {}
    for r in rules:
        for ident in (r.id, *r.aliases):
            if ident in seen:
                errors.append(f"{r.path}:1: id {ident!r} already used by {seen[ident]}")
            seen[ident] = r.path
    if errors:
        raise RuleError(errors)
    return sorted(rules, key=lambda r: r.id)


def rule_ids(directory: str | Path | None = None) -> dict[str, str] | None:
    """Every id the rules in ``directory`` answer to: id -> id, former id (alias) -> id now; None
    when they cannot be loaded (``load_rules`` says why). For checking ``severity_overrides``."""
    try:
        rules = load_rules(directory)
    except RuleError:
        return None
    out: dict[str, str] = {}
    for r in rules:
        out[r.id] = r.id
        for a in r.aliases:
            out.setdefault(a, r.id)
    return out


def _load_one(p: Path, sigs: set[str], kns: set[str] | None, errors: list[str]) -> Rule | None:
    try:
        with open(p, "rb") as fh:
            data = fh.read(MAX_RULE_BYTES + 1)
    except OSError as e:
        errors.append(f"{p}:1: cannot read: {e}")
        return None
    rule, found = _parsed(p, data, frozenset(sigs), None if kns is None else frozenset(kns))
    errors.extend(found)
    return rule


@functools.lru_cache(maxsize=512)
def _parsed(
    p: Path, data: bytes, sigs: frozenset[str], kns: frozenset[str] | None
) -> tuple[Rule | None, tuple[str, ...]]:
    """One rule file's bytes as a rule and its problems, parsed once per content: the YAML
    parser's pure-Python scanner made reading ``rules/`` the largest single cost of a process
    that loads them more than once (the test suite: ~170 loads per worker). A rule is frozen
    and nothing changes its ``explain`` or ``examples``, so callers may share one."""
    errors: list[str] = []
    rule = _rule_of(p, data, sigs, kns, errors)
    return rule, tuple(errors)


def _rule_of(
    p: Path, data: bytes, sigs: frozenset[str], kns: frozenset[str] | None, errors: list[str]
) -> Rule | None:
    start = len(errors)
    try:
        raw = yamlsafe.loads(yamlsafe.decode(data, MAX_RULE_BYTES), _LineLoader, max_nodes=MAX_RULE_NODES)
    except yamlsafe.YamlError as e:
        what = (
            e.problem
            if e.problem.startswith(("not UTF-8", "larger than", "a binary"))
            else f"invalid YAML: {e.problem}"
        )
        errors.append(f"{p}:{e.line or 1}: {what}")
        return None
    if not isinstance(raw, dict):
        errors.append(f"{p}:1: a rule file must be a mapping")
        return None
    lines: dict[str, int] = raw.get("__lines__", {})

    def err(key: str, msg: str, node: Any = None) -> None:
        line = node.get("__line__") if isinstance(node, dict) else lines.get(key, raw.get("__line__", 1))
        errors.append(f"{p}:{line}: {key}: {msg}")

    allowed = {
        "version",
        "id",
        "summary",
        "severity",
        "priority",
        "when",
        "for",
        "gate",
        "knob",
        "explain",
        "examples",
        "aliases",
        "category",
        "__line__",
        "__lines__",
    }
    for k in raw:
        if k not in allowed:
            err(k, "unknown key")
    if raw.get("version") != FORMAT:
        err("version", f"must be {FORMAT!r}")
    rid = raw.get("id")
    if not isinstance(rid, str) or not names.RULE_ID_RE.match(rid):
        err("id", "must be kebab-case (e.g. kv-cache-preemption)")
    elif rid != p.stem:
        err("id", f"must equal the file name ({p.stem!r})")
    summary = raw.get("summary")
    if not isinstance(summary, str) or not summary.strip() or "{" in summary:
        err("summary", "must be a static, non-empty sentence")
    severity = raw.get("severity")
    if not _known(severity, SEVERITIES):
        err("severity", f"must be one of {', '.join(SEVERITIES)}")
    priority = raw.get("priority", 50)
    if not isinstance(priority, int) or isinstance(priority, bool):
        err("priority", "must be an integer (higher wins)")
        priority = 50

    aliases = raw.get("aliases", []) or []
    if not isinstance(aliases, list) or not all(
        isinstance(a, str) and names.RULE_ID_RE.match(a) for a in aliases
    ):
        err("aliases", "must be a list of former rule ids (kebab-case)")
        aliases = []
    category = raw.get("category", "")
    if not isinstance(category, str):
        err("category", "must be a word")
        category = ""

    def conditions(key: str, required: bool, val: Any = None) -> tuple[Condition, ...]:
        val = raw.get(key) if val is None else val
        if val is None:
            if required:
                err(key, "required: a list of {signal, op, value}")
            return ()
        items = val if isinstance(val, list) else [val]
        out = []
        for c in items:
            if not isinstance(c, dict):
                err(key, "each condition must be a mapping {signal, op, value}")
                continue
            s, op, v = c.get("signal"), c.get("op"), c.get("value")
            bad = False
            if not _known(s, sigs):
                err(key, f"unknown signal {s!r}", c)
                bad = True
            if not _known(op, OPS):
                err(key, f"op must be one of {' '.join(OPS)}", c)
                bad = True
            if not (isinstance(v, int | float) and not isinstance(v, bool)) and not (
                isinstance(v, str) and v.startswith("target:")
            ):
                err(key, "value must be a number or 'target:<name>'", c)
                bad = True
            extra = set(c) - {"signal", "op", "value", "__line__", "__lines__"}
            if extra:
                err(key, f"unknown keys {sorted(extra)}", c)
            if not bad:
                out.append(Condition(str(s), str(op), v if isinstance(v, str) else float(v or 0)))
        return tuple(out)

    when = conditions("when", True)
    gate = conditions("gate", False)
    for_s = 0.0
    try:
        for_s = parse_duration(raw.get("for", 0))
    except ValueError as e:
        err("for", str(e))

    knobs_raw = raw.get("knob")
    knob_items = knobs_raw if isinstance(knobs_raw, list) else [knobs_raw] if knobs_raw else []
    if not knob_items:
        err("knob", "required: {name, direction, step} or a list of them (tried in order)")
    choices = []
    for k in knob_items:
        if not isinstance(k, dict):
            err("knob", "must be a mapping")
            continue
        name, direction, step = k.get("name"), k.get("direction"), k.get("step")
        if kns is not None and not _known(name, kns):
            err("knob", f"unknown knob {name!r}", k)
        if not _known(direction, DIRECTIONS):
            err("knob", f"direction must be one of {', '.join(DIRECTIONS)}", k)
        if step is not None and not (isinstance(step, str) and STEP_RE.match(step)):
            err("knob", f"bad step {step!r} (e.g. -25%, x2, /2, +0.05, =0)", k)
        bound = k.get("bound")
        bound_sig = bound.get("signal") if isinstance(bound, dict) else None
        if bound is not None and not _known(bound_sig, sigs):
            err("knob", f"bound must be {{signal: <known signal>}}, got {_strip(bound)!r}", k)
        unless = conditions("knob.unless", False, k.get("unless")) if "unless" in k else ()
        extra = set(k) - {"name", "direction", "step", "bound", "unless", "note", "__line__", "__lines__"}
        if extra:
            err("knob", f"unknown keys {sorted(extra)}", k)
        choices.append(
            KnobChoice(str(name), str(direction), step, bound_sig, str(k.get("note", "")).strip(), unless)
        )

    explain = raw.get("explain")
    if not isinstance(explain, dict):
        err("explain", f"required: a mapping with {', '.join(DOC_SECTIONS)}")
        explain = {}
    for section in DOC_SECTIONS:
        v = explain.get(section)
        if v in (None, "", []):
            err("explain", f"missing section {section!r}", explain)
        elif section in ("verify", "evidence"):
            for s in v if isinstance(v, list) else [v]:
                if not _known(s, sigs):
                    err("explain", f"{section}: unknown signal {s!r}", explain)
        elif section == "references":
            for ref in v if isinstance(v, list) else [v]:
                if not (isinstance(ref, str) and ref.startswith("https://")):
                    err("explain", f"references: not an https URL: {ref!r}", explain)

    examples = raw.get("examples")
    if not isinstance(examples, dict) or not examples.get("fires") or not examples.get("quiet"):
        err("examples", "required: fires: [...] and quiet: [...] (each a mapping of signal values)")
        examples = {}
    for kind in ("fires", "quiet"):
        listed = examples.get(kind, []) or []
        if not isinstance(listed, list):
            err("examples", f"{kind}: must be a list of mappings of signal: value")
            continue
        for ex in listed:
            if not isinstance(ex, dict):
                err("examples", f"{kind}: each example must be a mapping of signal: value")
                continue
            for s in ex:
                if (
                    s not in ("__line__", "__lines__")
                    and not _known(s, sigs)
                    and (kns is None or not _known(s, kns))
                ):
                    err("examples", f"{kind}: unknown signal or knob {s!r}", ex)

    if len(errors) > start:
        return None
    return Rule(
        id=str(rid),
        summary=str(summary).strip(),
        severity=str(severity),
        priority=int(priority),
        when=when,
        for_s=for_s,
        gate=gate,
        knobs=tuple(choices),
        explain=_strip(explain),
        examples={k: _strip(v) for k, v in examples.items() if k in ("fires", "quiet")},
        path=str(p),
        aliases=tuple(aliases),
        category=category,
    )
