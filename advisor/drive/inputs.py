"""Feed an :class:`~advisor.runner.Advisor` from what a user points at: a recorded
session, saved pages and logs. (A live URL is observed by ``daemon.observe``.)"""

from __future__ import annotations

import gzip
import itertools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from advisor.core import knobs
from advisor.core.config import Config
from advisor.core.model import Snapshot
from advisor.diagnose import evidence
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import Rule
from advisor.drive.runner import Advisor, ReplayClock, base_from_session_engine, replay
from advisor.sources import prometheus as prom_src
from advisor.sources.cmdline import PastedCommand
from advisor.sources.metrics import MAX_PAGE_BYTES, MetricsError, describe_warning
from advisor.sources.session import Session


class NoData(Exception):
    """The input was read and holds nothing to diagnose (an empty page): exit 4, not 1."""


class InputError(Exception):
    """A file or directory the user gave cannot be used (with the path in the message)."""


def advisor_for_session(
    s: Session,
    cfg: Config,
    rules: Sequence[Rule],
    config_path: str | None = None,
    command: PastedCommand | None = None,
) -> tuple[Advisor, ReplayClock]:
    """An advisor set up as the daemon beside the recorded server was: the session's command
    line (or ``command``, a pasted one) and host facts, its start for year-less log
    timestamps, and a clock the replay moves."""
    clock = ReplayClock()
    serve_args = list(command.argv) if command is not None else s.meta.get("serve_args")
    adv = Advisor(
        cfg,
        rules,
        base={
            **base_from_session_engine(s.engine, isinstance(serve_args, list)),
            **(command.facts() if command is not None else {}),
        },
        config_path=config_path,
        argv_provider=(lambda: serve_args) if isinstance(serve_args, list) else None,
        clock=clock,
        log_near=s.started.timestamp(),
    )
    return adv, clock


def from_session(
    directory: str | Path,
    cfg: Config,
    rules: Sequence[Rule],
    on_diagnosis: Callable[[float, Diagnosis], None] | None = None,
    config_path: str | None = None,
    command: PastedCommand | None = None,
    simulate: bool = True,
) -> tuple[Advisor, Diagnosis | None]:
    """Replay a session as the daemon would have lived it; the last diagnosis is the answer.
    Only the last one simulates its candidates (the earlier ones evaluate the rules' hold times;
    the closed form scores them): ``simulate`` False, none does (``predict`` reads the model)."""
    s = Session.load(directory)
    adv, _ = advisor_for_session(s, cfg, rules, config_path, command)
    scrapes = [t for _, kind, t, _ in s.timeline() if kind == "scrape" and t is not None]
    adv.simulate_from = (scrapes[-1] if scrapes else -math.inf) if simulate else math.inf
    last = replay(adv, ((i.kind, i.t, i.text) for i in s.replay()), on_diagnosis)
    return adv, last


def from_files(
    metric_files: Sequence[str],
    log_file: str | None,
    cfg: Config,
    rules: Sequence[Rule],
    interval_s: float = 60.0,
    config_path: str | None = None,
    command: PastedCommand | None = None,
) -> tuple[Advisor, Diagnosis | None]:
    """Diagnose saved pages (oldest first) and/or a log file (``command``: the server's
    command line, from ``--command-file``).

    Pages carry no time, so the file's modification times are used when they rise by a second
    or more from page to page, else the pages are taken ``interval_s`` apart (files a clone or a
    copy wrote milliseconds apart say nothing of when they were scraped). A few pages are no time series: ``for:`` hold times are
    not applied and the minimum window is the pages' span.

    One page alone has no rates (one reading; its file's time is when it was copied), and a
    verdict it cannot support is withheld (``evidence.single_page_verdict``). A log alone:
    its periodic stats lines become the pages (``evidence.pages_from_stats``)."""
    clock = ReplayClock()
    inf = float("inf")
    cfg1 = replace(cfg, min_window_s=0.0, warmup_s=0.0, stale_after_s=inf, window_s=inf, retention_s=inf)
    # a log's year-less stamps are read near when it was last written (not near today)
    near = _mtime(log_file) if log_file else None
    argv = list(command.argv) if command is not None else None
    adv = Advisor(
        cfg1,
        rules,
        base=command.facts() if command is not None else None,
        config_path=config_path,
        clock=clock,
        log_near=near,
        argv_provider=(lambda: argv) if argv is not None else None,
    )
    adv.evaluator.honor_for = False
    if log_file:
        try:
            with open(log_file, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    adv.on_log_line(line[:MAX_PAGE_BYTES])
        except OSError as e:
            raise InputError(f"{log_file}: cannot read: {e.strerror or e}") from None
        adv.flush_logs()
    if not metric_files:
        return adv, _from_log_stats(adv, clock, log_file) if log_file else None
    times = _times(metric_files, interval_s)
    for path, t in zip(metric_files, times, strict=True):
        text = _read_page(path)
        if not text.strip():  # read fine, nothing in it: too little data, as an empty log
            raise NoData(f"{path}: an empty page, no samples: too little data to diagnose")
        clock.t = t
        if not adv.on_page(text, t):
            raise InputError(f"{path}: {adv.stats.last_error}")
        adv.input_warnings.extend(describe_warning(w, path) for w in adv.last_page_warnings)
    d = adv.diagnose(times[-1])
    if len(metric_files) == 1 and adv.window.latest is not None:
        d = evidence.single_page_verdict(d, adv.window.latest)
    return adv, d


def _from_log_stats(adv: Advisor, clock: ReplayClock, log_file: str) -> Diagnosis:
    """A diagnosis from the log's periodic stats lines (no page given)."""
    events = list(adv.window.events("engine_stats")) + list(adv.window.events("preemption"))
    events.sort(key=lambda e: e.t if e.t is not None else 0.0)
    pages = evidence.pages_from_stats(events)
    if len(pages) < 2:
        return evidence.no_stats_diagnosis(adv.engine, log_file, len(pages), clock.t)
    for snap in pages:
        clock.t = snap.t
        adv.window.add_snapshot(snap)
    adv.up = True
    d = adv.diagnose(pages[-1].t)
    return evidence.log_stats_verdict(d, pages)


def from_prometheus(
    history: prom_src.History,
    cfg: Config,
    rules: Sequence[Rule],
    at: float,
    window_s: float,
) -> tuple[Advisor, Diagnosis]:
    """Diagnose one server from the pages a Prometheus holds (``explain --prometheus``): its
    scrapes replayed in order, each one evaluated as the daemon would have, the answer at
    ``at``. Knobs no source gave (vLLM's defaults assumed) are named in the context."""
    clock = ReplayClock(history.snapshots[0].t if history.snapshots else at)
    cfg1 = replace(
        cfg, window_s=max(window_s, cfg.min_window_s), retention_s=max(cfg.retention_s, window_s + 60.0)
    )
    adv = Advisor(cfg1, rules, base=history.engine, clock=clock)
    adv.simulate_from = at  # the answer's decision simulates its candidates; the replay's do not
    items: list[tuple[float, int, Snapshot | None]] = [(s.t, 1, s) for s in history.snapshots]
    items += [(t, 0, None) for t in history.down]
    for t, _, snap in sorted(items, key=lambda i: (i[0], i[1])):
        clock.t = t
        if snap is None:
            adv.on_scrape_error(MetricsError("refused", "Prometheus could not scrape it (up == 0)"), t)
        else:
            adv.on_snapshot(snap)
        adv.diagnose(t)
    clock.t = at
    if history.bad_sidecar:  # named like a page's bad samples (G5)
        adv.note_bad_samples(history.bad_sidecar, at)
    d = adv.diagnose(at)
    unknown = sorted(k for k in knobs.KNOBS if adv.engine.source(k) == "default")
    ctx = {**d.context, "instance": history.instance, "knobs_unknown": unknown}
    if history.warnings:  # a partial answer: what is missing may be what matters
        ctx["prometheus_warnings"] = list(history.warnings)
        return adv, partial_answer(d, history.warnings, ctx)
    return adv, replace(d, context=ctx)


def partial_answer(d: Diagnosis, warnings: Sequence[str], context: dict[str, Any] | None = None) -> Diagnosis:
    """``d`` made unknown because Prometheus answered with warnings (``partial response``, a
    truncated result): data that may be missing series is never called healthy, nor advised on."""
    shown = "; ".join(dict.fromkeys(warnings))[:300]
    return Diagnosis(
        "insufficient-data",
        f"Prometheus answered with warnings, so the data may be partial: {shown}",
        None,
        d.findings,
        d.engine,
        d.context if context is None else context,
        d.at,
        d.signals,
    )


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None  # reading it says why


MIN_MTIME_GAP_S = 1.0  # saved pages' file times this far apart at least are when they were taken


def _times(paths: Sequence[str], interval_s: float) -> list[float]:
    try:
        mtimes = [os.stat(p).st_mtime for p in paths]
    except OSError as e:
        raise InputError(f"{e.filename}: {e.strerror}") from None
    gaps = [b - a for a, b in itertools.pairwise(mtimes)]
    if all(g >= MIN_MTIME_GAP_S for g in gaps):
        return mtimes
    # written together (a clone, a copy, an archive unpacked): their times say nothing
    return [i * interval_s for i in range(len(paths))]


def _read_page(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    if path.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except OSError as e:
            raise InputError(f"{path}: not a gzip file: {e}") from None
    if len(data) > MAX_PAGE_BYTES:
        raise InputError(f"{path}: larger than {MAX_PAGE_BYTES} bytes")
    return data.decode("utf-8", errors="replace")


__all__ = ["InputError", "MetricsError", "from_files", "from_prometheus", "from_session", "partial_answer"]
