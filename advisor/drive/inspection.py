"""``vllm-advisor inspect``: what the sources learned, before any diagnosis.

JSON keys: ``engine`` (``vllm_version``, ``knobs.<name>.value/.source/.detail``,
``facts``), ``logs`` (``counts.<kind>``, ``lines``, ``errors``), ``metrics``
(``families`` as canonical names, ``engines``, ``model_names``, ``pages``), ``plugin``
(``loaded``; the stat-logger plugin's ``version``, ``vllm_version``, ``export``, ``port``,
``window_seconds``, ... when loaded; ``vllm_support``: checked | older | newer | unknown, from
advisor/plugin/versions.py; ``latency_sources``: per latency, ``plugin sketch``, ``vLLM
histogram`` or null).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from rich.console import Console
from rich.table import Table

from advisor.core import engine_json, urls
from advisor.core.model import EVENT_KINDS, LogEvent, Snapshot
from advisor.derive import sketches
from advisor.drive.runner import base_from_session_engine
from advisor.plugin import versions as plugin_versions
from advisor.sources import cmdline as cmdline_src
from advisor.sources import engine, logs
from advisor.sources import engine_config as engine_config_src
from advisor.sources import host as host_src
from advisor.sources import metrics as metrics_src
from advisor.sources.session import Session, SessionError


class InspectError(Exception):
    pass


def _metrics_url(url: str) -> str:
    return urls.metrics_url(url)


def inspect(
    url: str | None = None,
    session_dir: str | None = None,
    metrics_files: Sequence[str] = (),
    log_file: str | None = None,
    engine_config: str | None = None,
    command_file: str | None = None,
) -> dict[str, Any]:
    pages: list[Snapshot] = []
    page_errors: list[str] = []
    warnings: list[str] = []  # parts of pages skipped as unreadable, one line each
    lines: list[str] = []
    argv: Sequence[str] | None = None
    base: dict[str, Any] = {}
    near: float | None = None  # year-less log stamps: nearest now, or a session's start
    if url:
        try:
            page = metrics_src.fetch(_metrics_url(url))
            pages.append(metrics_src.parse_page(page.text, page.t))
            warnings.extend(metrics_src.describe_warning(w, url) for w in pages[-1].warnings)
        except metrics_src.MetricsError as e:
            raise InspectError(str(e)) from None
        port = urlparse(url).port
        argv = host_src.find_vllm_process(port)
        base.update(host_src.host_facts())
        base.update(engine.from_api(url))
    if session_dir:
        try:
            s = Session.load(session_dir)
        except SessionError as e:
            raise InspectError(str(e)) from None
        serve_args = s.meta.get("serve_args")
        base.update(base_from_session_engine(s.engine, isinstance(serve_args, list)))
        serve_args = s.meta.get("serve_args")
        argv = serve_args if isinstance(serve_args, list) else argv
        near = s.started.timestamp()
        for t, text in s.iter_scrapes():
            try:
                pages.append(metrics_src.parse_page(text, t))
                warnings.extend(
                    metrics_src.describe_warning(w, f"page at {t:.3f}") for w in pages[-1].warnings
                )
            except metrics_src.MetricsError as e:
                page_errors.append(f"page at {t:.3f}: {e}")
        lines.extend(s.log_lines())
    for i, path in enumerate(metrics_files):
        try:
            pages.append(metrics_src.read_file(path, t=float(i)))
            warnings.extend(metrics_src.describe_warning(w, path) for w in pages[-1].warnings)
        except metrics_src.MetricsError as e:
            raise InspectError(str(e)) from None
        except OSError as e:
            raise InspectError(f"{path}: cannot read: {e.strerror or e}") from None
    if log_file:
        if near is None:  # read near when the log was last written
            with contextlib.suppress(OSError):
                near = os.stat(log_file).st_mtime
        try:
            with open(log_file, encoding="utf-8", errors="replace") as fh:
                lines.extend(fh)
        except OSError as e:
            raise InspectError(f"{log_file}: cannot read: {e.strerror or e}") from None
    command: dict[str, Any] | None = None
    if command_file:
        try:
            cmd = cmdline_src.read_command_file(command_file)
        except cmdline_src.CommandError as e:
            raise InspectError(str(e)) from None
        argv = cmd.argv  # the pasted command wins over a process found on this host
        base.update(cmd.facts())
        command = {"launcher": cmd.launcher, "argv": cmd.argv, "warnings": cmd.warnings}
    events = list(logs.parse_lines(lines, near=near))
    try:
        info = engine.resolve(
            config_path=engine_config,
            argv=argv,
            events=events,
            snapshot=pages[-1] if pages else None,
            host=base,
        )
    except engine_config_src.EngineSourceError as e:
        raise InspectError(str(e)) from None
    report = {
        "engine": engine_json.to_json(info),
        "logs": _logs_report(events),
        "metrics": _metrics_report(pages, page_errors, warnings),
        "plugin": plugin_report(pages, info.get("vllm_version")),
    }
    if command is not None:
        report["command"] = command
    return report


def plugin_report(pages: Sequence[Snapshot], vllm_version: Any) -> dict[str, Any]:
    """Is the stat-logger plugin loaded (its ``plugin_info`` on the last page), can this vLLM
    load it, and where each latency's quantiles come from."""
    last = pages[-1] if pages else None
    info = sketches.plugin_info_of(last) if last is not None else None
    version = (info.vllm_version if info is not None else None) or (
        str(vllm_version) if vllm_version else None
    )
    out: dict[str, Any] = {"loaded": info is not None}
    if info is not None:
        out.update(info.to_json())
    out["vllm_support"] = plugin_versions.loading(version)
    out["vllm_versions_checked"] = [plugin_versions.VERSIONS_CHECKED[0], plugin_versions.VERSIONS_CHECKED[-1]]
    out["latency_sources"] = sketches.page_sources(last) if last is not None else {}
    return out


def plugin_lines(p: dict[str, Any], vllm_version: Any) -> list[str]:
    """The plugin in words: loaded or not (and why it might not be), and each latency's source."""
    first, last = p.get("vllm_versions_checked") or ["?", "?"]
    support = p.get("vllm_support")
    if p.get("loaded"):
        where = "vLLM's /metrics" if p.get("export") == "registry" else f"port {p.get('port') or '?'}"
        lines = [
            f"Plugin: loaded, version {p.get('version') or '?'}, export {p.get('export') or '?'} "
            f"({where}), quantile window {p.get('window_seconds', 0):g} s, prompt buckets "
            f"{p.get('prompt_buckets') or '?'}, output buckets {p.get('output_buckets') or '?'}"
        ]
    elif support == "older":
        lines = [
            f"Plugin: not loaded. vLLM {vllm_version} is older than {first}, the first version whose "
            "loading of stat-logger plugins (entry-point group vllm.stat_logger_plugins) was checked: "
            "it may not load it at all; per-length latency needs vLLM >= " + str(first) + "."
        ]
    else:
        why = {
            "checked": f"vLLM {vllm_version} loads it (checked {first} to {last})",
            "newer": f"vLLM {vllm_version} is newer than the versions checked ({first} to {last}): expected to load it",
            "unknown": "the vLLM version is unknown",
        }.get(str(support), "")
        lines = [
            f"Plugin: not loaded ({why}); `pip install vllm-advisor[plugin]` into vLLM's environment "
            "gives exact latency per request length (docs/plugin.md)"
        ]
    src = p.get("latency_sources") or {}
    by: dict[str, list[str]] = {}
    for qty, where in src.items():
        if where == sketches.SOURCE_PLUGIN:
            where += " (by request length)" if qty in sketches.BY_LENGTH else " (all lengths)"
        by.setdefault(where or "absent", []).append(QUANTITY_WORDS.get(qty, qty))
    if by:
        lines.append("Latency quantiles: " + "; ".join(f"{', '.join(q)} from {w}" for w, q in by.items()))
    return lines


QUANTITY_WORDS = {
    "ttft": "TTFT",
    "tpot": "TPOT",
    "itl": "ITL",
    "e2e": "e2e",
    "queue": "queue",
    "prefill": "prefill",
}


def _logs_report(events: Iterable[LogEvent]) -> dict[str, Any]:
    counts = dict.fromkeys(EVENT_KINDS, 0)
    errors: list[dict[str, Any]] = []
    n = 0
    for ev in events:
        n += 1
        counts[ev.kind] = counts.get(ev.kind, 0) + 1
        if ev.kind == "error" and len(errors) < 20:
            errors.append({"error": ev.fields.get("error"), "line": ev.line[:300]})
    return {"lines": n, "counts": counts, "errors": errors}


def _metrics_report(pages: Sequence[Snapshot], errors: list[str], warnings: list[str]) -> dict[str, Any]:
    if not pages:
        return {
            "pages": 0,
            "families": [],
            "engines": [],
            "model_names": [],
            "errors": errors,
            "warnings": warnings,
        }
    fams: set[str] = set()
    engines: set[str] = set()
    models: set[str] = set()
    for p in pages:
        fams.update(metrics_src.vllm_families(p))
        engines.update(metrics_src.engines(p))
        models.update(metrics_src.model_names(p))
    return {
        "pages": len(pages),
        "families": sorted(fams),
        "engines": sorted(engines),
        "model_names": sorted(models),
        "errors": errors,
        "warnings": warnings,
    }


def render_text(report: dict[str, Any]) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=120, color_system=None, highlight=False)
    eng = report["engine"]
    con.print(
        f"vLLM {eng.get('vllm_version') or '(version unknown)'} · model {eng.get('model') or '?'} · "
        f"device {eng.get('device') or '?'}"
    )
    t = Table(title="Engine knobs", title_justify="left", box=None, show_edge=False)
    for col in ("knob", "value", "source", "detail"):
        t.add_column(col)
    for name, k in eng.get("knobs", {}).items():
        t.add_row(name, str(k.get("value")), str(k.get("source")), str(k.get("detail", ""))[:60])
    con.print(t)
    logs = report["logs"]
    con.print(f"Log: {logs['lines']} lines: " + ", ".join(f"{k} {v}" for k, v in logs["counts"].items()))
    for e in logs["errors"][:5]:
        con.print(f"  error {e['error']}: {e['line'][:100]}")
    cmd = report.get("command")
    if cmd:
        con.print(f"Command ({cmd['launcher']}): {' '.join(cmd['argv'])}")
        for w in cmd["warnings"]:
            con.print(f"  warning: {w}")
    m = report["metrics"]
    con.print(
        f"Metrics: {m['pages']} page(s), {len(m['families'])} vLLM families, engines {m['engines']}, "
        f"models {m['model_names']}"
    )
    for err in m.get("errors", [])[:5]:
        con.print(f"  bad page: {err}")
    for w in m.get("warnings", []):
        con.print(f"  warning: {w}", soft_wrap=True)
    if report.get("plugin") and m["pages"]:
        for line in plugin_lines(report["plugin"], eng.get("vllm_version")):
            con.print(line, markup=False, soft_wrap=True)
    return buf.getvalue()


__all__ = ["InspectError", "Path", "inspect", "render_text"]
