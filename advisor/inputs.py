"""Feed an :class:`~advisor.runner.Advisor` from what a user points at: a recorded
session, saved pages and logs. (A live URL is observed by ``daemon.observe``.)"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from advisor import knobs
from advisor.advise import Diagnosis
from advisor.config import Config
from advisor.model import Snapshot
from advisor.ruleset import Rule
from advisor.runner import Advisor, ReplayClock, base_from_session_engine, replay
from advisor.session import Session
from advisor.sources import prometheus as prom_src
from advisor.sources.metrics import MAX_PAGE_BYTES, MetricsError


class InputError(Exception):
    """A file or directory the user gave cannot be used (with the path in the message)."""


def advisor_for_session(
    s: Session, cfg: Config, rules: Sequence[Rule], config_path: str | None = None
) -> tuple[Advisor, ReplayClock]:
    """An advisor set up as the daemon beside the recorded server was: the session's command
    line and host facts, its start for year-less log timestamps, and a clock the replay moves."""
    clock = ReplayClock()
    serve_args = s.meta.get("serve_args")
    adv = Advisor(
        cfg,
        rules,
        base=base_from_session_engine(s.engine, isinstance(serve_args, list)),
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
) -> tuple[Advisor, Diagnosis | None]:
    """Replay a session as the daemon would have lived it; the last diagnosis is the answer."""
    s = Session.load(directory)
    adv, _ = advisor_for_session(s, cfg, rules, config_path)
    last = replay(adv, ((i.kind, i.t, i.text) for i in s.replay()), on_diagnosis)
    return adv, last


def from_files(
    metric_files: Sequence[str],
    log_file: str | None,
    cfg: Config,
    rules: Sequence[Rule],
    interval_s: float = 60.0,
    config_path: str | None = None,
) -> tuple[Advisor, Diagnosis | None]:
    """Diagnose saved pages (oldest first) and/or a log file.

    Pages carry no time, so the file's modification times are used when they differ,
    else ``interval_s`` apart. A few pages are no time series: ``for:`` hold times are
    not applied and the minimum window is the pages' span."""
    clock = ReplayClock()
    cfg1 = replace(cfg, min_window_s=0.0, warmup_s=0.0, stale_after_s=float("inf"), window_s=float("inf"))
    # a log's year-less stamps are read near when it was last written (not near today)
    near = _mtime(log_file) if log_file else None
    adv = Advisor(cfg1, rules, config_path=config_path, clock=clock, log_near=near)
    adv.evaluator.honor_for = False
    if log_file:
        try:
            with open(log_file, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    adv.on_log_line(line[:MAX_PAGE_BYTES])
        except OSError as e:
            raise InputError(f"{log_file}: cannot read: {e.strerror or e}") from None
        adv.flush_logs()
    times = _times(metric_files, interval_s)
    for path, t in zip(metric_files, times, strict=True):
        text = _read_page(path)
        clock.t = t
        if not adv.on_page(text, t):
            raise InputError(f"{path}: {adv.stats.last_error}")
    if not metric_files:
        return adv, None
    return adv, adv.diagnose(times[-1])


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
    d = adv.diagnose(at)
    unknown = sorted(k for k in knobs.KNOBS if adv.engine.source(k) == "default")
    ctx = {**d.context, "instance": history.instance, "knobs_unknown": unknown}
    return adv, replace(d, context=ctx)


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None  # reading it says why


def _times(paths: Sequence[str], interval_s: float) -> list[float]:
    try:
        mtimes = [os.stat(p).st_mtime for p in paths]
    except OSError as e:
        raise InputError(f"{e.filename}: {e.strerror}") from None
    if len(set(mtimes)) == len(mtimes) and mtimes == sorted(mtimes):
        return mtimes
    return [i * interval_s for i in range(len(paths))]


def _read_page(path: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}") from None
    if path.endswith(".gz"):
        import gzip

        try:
            data = gzip.decompress(data)
        except OSError as e:
            raise InputError(f"{path}: not a gzip file: {e}") from None
    if len(data) > MAX_PAGE_BYTES:
        raise InputError(f"{path}: larger than {MAX_PAGE_BYTES} bytes")
    return data.decode("utf-8", errors="replace")


__all__ = ["InputError", "MetricsError", "from_files", "from_prometheus", "from_session"]
