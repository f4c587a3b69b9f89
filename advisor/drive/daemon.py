"""The only place with threads, timers and sleeps.

``run``: a cycle thread scrapes vLLM every ``interval`` and evaluates after each scrape (timed
on the monotonic clock: a wall clock that steps neither freezes it nor makes it run the missed
cycles; a cycle longer than the interval is followed at once by the next, and the daemon says so
once per episode);
a thread follows the log; the exporter serves the latest immutable state; SIGINT and
SIGTERM shut everything down cleanly. ``observe`` watches a URL for ``explain --url``;
``replay`` drives a recorded session in real time (or faster) for demos and tests.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import structlog
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from advisor.core import jsonout, statefile, urls
from advisor.core.config import Config, parse_listen
from advisor.core.log import configure_logging
from advisor.derive import identity, timeseries
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import Rule
from advisor.drive import scaling
from advisor.drive.history import FILE as ADVICE_FILE
from advisor.drive.history import (
    PENDING_FILE,
    AdviceHistory,
    PendingExperiment,
    experiment_record,
    interrupted_record,
)
from advisor.drive.inputs import advisor_for_session
from advisor.drive.runner import Advisor, export_state
from advisor.outputs.exporter import PageSources, make_server
from advisor.outputs.state import ExportState, History
from advisor.predict import replicas as rp
from advisor.sources import cmdline as cmdline_src
from advisor.sources import engine, follow
from advisor.sources import host as host_src
from advisor.sources import http as http_src
from advisor.sources import metrics as metrics_src
from advisor.sources.session import Session, SessionError
from advisor.verify.ledger import DurableLedger, ExperimentRecord, Ledger, LedgerError

log = structlog.get_logger("vllm-advisor")
HISTORY_ROWS = 50  # experiments /history shows
PAGE_WAIT_S = 2.0  # a page waits this long for a cycle to let go of the window
# The wall clock moved this much more (or less) than the monotonic clock between two cycles: a
# step (NTP stepping a clock that was far off, a hand-set clock, a VM resumed), not a slew (NTP
# slews at most 0.5 ms/s: 2.5 ms over a 5 s interval).
CLOCK_STEP_S = 1.0


def metrics_url(url: str) -> str:
    return urls.metrics_url(url)


class Daemon:
    """Wires the sources, the advisor state and the exporter together."""

    def __init__(
        self,
        cfg: Config,
        rules: Sequence[Rule],
        advisor: Advisor | None = None,
        clock: Callable[[], float] = time.time,
        persist: bool = True,
        http: http_src.Client | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.cfg = cfg
        self.persist = persist
        self.rules = tuple(rules)
        # ``clock``: wall time, for what is stamped, shown and stored (pages, advice, the
        # ledger); ``monotonic``: for every interval and staleness (time.monotonic; an injected
        # wall clock without one, a replay's or a test's, is taken as both)
        self.clock = clock
        self.mono = monotonic if monotonic is not None else (time.monotonic if clock is time.time else clock)
        self._scrape_mono: float | None = None  # monotonic time of the last completed scrape
        self._diag_mono: float | None = None  # ... of the published diagnosis
        self._wall_offset: float | None = None  # wall minus monotonic at the last cycle
        self.clock_step: tuple[float, float] | None = None  # the last step: seconds, monotonic time
        self.clock_steps = 0
        self.cycle_duration_s: float | None = None  # the last cycle's wall time
        self.cycle_interval_s: float | None = None  # the achieved time between cycle starts (EWMA)
        self._cycle_started: float | None = None
        self._cycle_running: float | None = None  # monotonic start of the cycle in progress (None: none)
        self._slow_logged = False
        self._cycle_avg_s: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.servers = identity.ServerTracker()  # one engine behind the URL, or several?
        # one client for every fetch of this daemon: stop() aborts whatever is in flight
        self.http = http if http is not None else http_src.Client()
        if advisor is None:
            port = cfg.vllm_port or urlparse(cfg.vllm_url).port
            version = engine.from_api(cfg.vllm_url, self.scrape_timeout_s, http=self.http)
            host = {**host_src.host_facts(), **version}

            def argv() -> Sequence[str] | None:
                try:
                    return host_src.find_vllm_process(port)
                except Exception:  # psutil access issues must never stop the daemon
                    return None

            advisor = Advisor(
                cfg, rules, base=host, config_path=cfg.engine_config, argv_provider=argv, clock=clock
            )
        self.advisor = advisor
        self.replica_hold = rp.Hold(cfg.scale_in_hold_s)  # the desired replicas' scale-in hold
        self.sizer = scaling.Sizer()
        self._state = self._build_state()
        self.follower: follow.LogFollower | None = None
        self.server: Any = None
        self._threads: list[threading.Thread] = []
        self.last_logged_status: str | None = None
        self.log_source_up: bool | None = None  # None: no log source configured
        self.log_source_restarts = 0
        self.log_skipped_lines = 0  # lines the log reader skipped when it fell behind (all sources)
        self.log_skipped_bytes = 0
        self._log_behind: tuple[int, int] | None = None  # behind since: skipped lines, bytes then
        self._last_failure: str | None = None  # the scrape error last logged (logged once, not per cycle)
        self._repeats = 0
        # what was judged is never lost: writes queued and retried (verify/ledger.py)
        self.ledger_path = cfg.ledger_path or str(Path(cfg.state_dir) / "ledger.sqlite")
        self.ledger: DurableLedger | None = DurableLedger(self.ledger_path) if persist else None
        self._ledger_lock = threading.Lock()
        self._ledger_failing = False
        if self.ledger is not None and self.ledger.damage:
            self._ledger_failing = True
            log.error(
                "the ledger is damaged",
                ledger=self.ledger_path,
                problems=self.ledger.damage[:5],
                hint="it is not written into: judged experiments wait in memory until it is restored or moved aside",
            )
        self.state_ok: bool | None = None  # None: nothing written yet
        self.state_error: str | None = None  # why the last write into the state dir failed
        # the advice given before (/history): in the state dir when the daemon persists there
        self.advice = AdviceHistory(
            Path(cfg.state_dir) / ADVICE_FILE if persist else None,
            merge_gap_s=max(3 * cfg.interval_s, 15.0),
        )
        if persist:
            self.advice.load()
            if self.advice.error:
                log.warning("cannot read the advice history", error=self.advice.error)
        self.judged: deque[ExperimentRecord] = deque(maxlen=HISTORY_ROWS)  # this process's, for /history
        # the experiment being observed, kept in the state dir: one cut short by a restart is
        # recorded as interrupted, never dropped
        self.pending = PendingExperiment(Path(cfg.state_dir) / PENDING_FILE if persist else None)
        if persist:
            self._recover_pending()

    def _recover_pending(self) -> None:
        """An experiment the daemon before this one was observing when it stopped or died: into
        the ledger as interrupted (inconclusive), with one warning. An unreadable file is named
        and left as it is."""
        try:
            rec = self.pending.load()
        except (ValueError, OSError) as e:
            log.warning("cannot read the experiment left pending", error=str(e), state_dir=self.cfg.state_dir)
            return
        if rec is None or self.ledger is None:
            return
        log.warning(
            "experiment interrupted by a restart; recorded as inconclusive",
            knob=rec.knob,
            old=rec.old_value,
            new=rec.new_value,
            started_at=rec.started_at,
            last_seen_at=rec.ended_at,
            ledger=self.ledger_path,
            reason=rec.reasons[0] if rec.reasons else None,
        )
        with self._ledger_lock:
            self.judged.append(rec)
            self.ledger.add(rec)
            self._ledger_episode()
        self.pending.written = True  # removed once the record is in the ledger
        if not self.ledger.pending:
            try:
                self.pending.clear()
            except OSError as e:
                log.warning("cannot remove the pending experiment", error=str(e))

    @property
    def scrape_timeout_s(self) -> float:
        """Every fetch ends before the next one is due: at most 80% of the interval."""
        return max(0.05, min(self.cfg.scrape_timeout_s, 0.8 * self.cfg.interval_s))

    def fresh_for_s(self) -> float:
        """A scrape this recent means vLLM is up; older, `up` falls to 0 and advice is withdrawn.
        Judged against the interval the daemon achieves, not only the one asked for: cycles that
        take longer than the interval run back to back (the runs missed are not made up),
        and a slow cycle is reported as such (``cycle_duration_seconds``), never taken for vLLM
        being unreadable: the last cycle's duration is added, and a cycle still running past it
        withdraws its advice saying so (:meth:`_why_not_fresh`)."""
        return 2 * max(self.cfg.interval_s, self.cycle_interval_s or 0.0) + (self.cycle_duration_s or 0.0)

    # ---------------------------------------------------------------- state
    def state(self) -> ExportState:
        """The state to export now. "up" means a scrape completed within two intervals: a
        cycle that is stuck or a scheduler that stopped cannot leave a stale ``up`` or stale
        advice behind."""
        st = self._state
        if (
            st.log_source_up != self.log_source_up
            or st.log_source_restarts != self.log_source_restarts
            or st.log_skipped_lines != self.log_skipped_lines
        ):
            st = dc_replace(
                st,
                log_source_up=self.log_source_up,
                log_source_restarts=self.log_source_restarts,
                log_skipped_lines=self.log_skipped_lines,
                log_skipped_bytes=self.log_skipped_bytes,
            )
        led = self.ledger
        if led is not None:
            st = dc_replace(
                st,
                ledger_pending=led.pending,
                ledger_write_failures=led.failures,
                ledger_dropped=led.dropped,
                ledger_error=led.last_error,
                state_write_ok=self.state_ok,
                state_error=self.state_error,
            )
        # ages on the monotonic clock: a wall clock stepped back an hour must not keep a stale
        # scrape fresh for that hour, nor one stepped forward call vLLM down (a replay or the
        # demo, which run no cycle, judge on their own clock)
        now, mono = self.clock(), self.mono()
        last = st.last_scrape_t
        scrape_age = (
            mono - self._scrape_mono
            if self._scrape_mono is not None
            else (now - last if last is not None else None)
        )
        fresh = scrape_age is not None and scrape_age <= self.fresh_for_s()
        d = st.diagnosis
        stale_advice = (
            d is not None
            and d.status == "advice"
            and (
                not fresh
                or (mono - self._diag_mono if self._diag_mono is not None else now - d.at)
                > max(1.5 * self.fresh_for_s(), self.cfg.stale_after_s)
            )
        )
        if fresh and not stale_advice:
            return st
        if d is not None and not fresh and d.gate != "vllm-down":  # the cycle stalled: old data
            d = dc_replace(d, gate="stale")
        if stale_advice:
            assert d is not None
            reason = (
                "the advisor's last evaluation is stale" if fresh else self._why_not_fresh(mono, scrape_age)
            )
            d = Diagnosis(
                "insufficient-data", reason, None, d.findings, d.engine, d.context, d.at, {}, gate="stale"
            )
        return dc_replace(st, diagnosis=d, up=st.up and fresh)

    def _why_not_fresh(self, mono: float, scrape_age: float | None) -> str:
        """Why the last scrape is too old to stand: vLLM unread for so long, or the advisor's
        own cycle running longer than the freshness allows (a machine too busy to give it a core
        for seconds, or a stuck cycle), where nothing is known of vLLM since it started."""
        running = self._cycle_running
        if running is not None and mono - running > self.fresh_for_s():
            return (
                f"the advisor's own cycle has run for {mono - running:.0f}s (a busy machine or a "
                "stuck cycle; cycle_duration_seconds says how long cycles take): advice withdrawn "
                "until one completes"
            )
        if scrape_age is None:
            return "no scrape of vLLM has completed yet: advice withdrawn"
        return f"no scrape of vLLM has completed for {scrape_age:.0f}s: advice withdrawn"

    def _record_experiments(self, take: bool = True) -> None:
        """Queue judged experiments for the ledger (SQLite under the state dir) and write what
        is queued; a write that fails is retried at the next cycle (``DurableLedger``), and
        said once per failure episode. ``take``: take the advisor's newly judged experiments
        (not while a switch between servers may be a load balancer). Without a ledger (a
        replay, the demo) they are kept in memory only, for ``/history``."""
        done: list[Any] = []
        if take:
            with self._lock:
                done, self.advisor.finished_experiments = self.advisor.finished_experiments, []
        if self.ledger is None and not done:
            return
        eng = self.advisor.engine
        with self._ledger_lock:
            for exp in done:
                rec = experiment_record(exp, eng)
                log.info(
                    "experiment judged",
                    knob=rec.knob,
                    old=rec.old_value,
                    new=rec.new_value,
                    verdict=exp.verdict,
                    ledger=self.ledger_path if self.ledger is not None else None,
                    reasons=list(exp.reasons),
                )
                self.judged.append(rec)
                if self.ledger is not None:
                    self.ledger.add(rec, flush=False)
            if self.ledger is None:
                return
            self.ledger.flush()
            self._ledger_episode()

    def _ledger_episode(self) -> None:
        led = self.ledger
        assert led is not None
        for bad in led.rejected:
            log.error("experiment cannot be stored in any ledger; dropped", record=bad)
        led.rejected.clear()
        if not led.ok and not self._ledger_failing:
            self._ledger_failing = True
            log.error(
                "cannot write the ledger",
                ledger=self.ledger_path,
                error=led.last_error,
                pending=led.pending,
                hint="kept in memory and retried every cycle (vllm_advisor_ledger_pending)",
            )
        elif led.ok and self._ledger_failing:
            self._ledger_failing = False
            log.info("ledger written again", ledger=self.ledger_path, failed_attempts=led.failures)

    def _keep_pending(self, at: float) -> None:
        """Write the experiment being observed (as it would be recorded if the daemon died now);
        remove the file once none is, and what it held is in the ledger. Raises OSError."""
        with self._lock:
            exp, eng = self.advisor.experiment, self.advisor.engine
        if exp is not None and exp.state == "observing":
            self.pending.save(interrupted_record(exp, eng, at, "was killed or crashed"), at)
        elif self.pending.written and (self.ledger is None or not self.ledger.pending):
            self.pending.clear()

    def _interrupt_pending(self) -> None:
        """At stop: the experiment still being observed goes to the ledger as interrupted (one
        warning); where the ledger cannot take it, its file stays for the next start."""
        if self.ledger is None or not self._lock.acquire(timeout=1.0):
            return
        try:
            exp, eng = self.advisor.experiment, self.advisor.engine
        finally:
            self._lock.release()
        if exp is None or exp.state != "observing":
            return
        now = self.clock()
        rec = interrupted_record(exp, eng, now, "stopped")
        log.warning(
            "experiment interrupted: the daemon stopped while observing it; recorded as inconclusive",
            knob=rec.knob,
            old=rec.old_value,
            new=rec.new_value,
            requests_seen=exp.after_requests,
            ledger=self.ledger_path,
        )
        with self._ledger_lock:
            self.judged.append(rec)
            self.ledger.add(rec, flush=False)
        self._flush_ledger_at_exit()
        try:
            if self.ledger.pending:
                self.pending.save(rec, now)  # the next start records it
            else:
                self.pending.clear()
        except OSError as e:
            log.warning("cannot write the pending experiment", error=str(e), state_dir=self.cfg.state_dir)

    def _flush_ledger_at_exit(self) -> None:
        """A last try at stop; what still cannot be written goes to the log, whole."""
        if self.ledger is None or not self.ledger.pending:
            return
        with self._ledger_lock:
            self.ledger.flush()
            if self.ledger.pending:
                log.error(
                    "experiments not written to the ledger at exit; they are here",
                    ledger=self.ledger_path,
                    error=self.ledger.last_error,
                    records=[asdict(r) for r in self.ledger.queue],
                )

    def _build_state(self, diagnosis: Diagnosis | None = None) -> ExportState:
        """The state to publish with ``diagnosis`` (under the lock); the advice history follows it."""
        replicas = None
        if diagnosis is not None:  # the server this sidecar watches, as the only replica of its load
            self.advice.observe(diagnosis)
            sizing = None
            if not self.servers.several:
                sizing = self.sizer(self.advisor, diagnosis, 1, upto=self.replica_hold.upto)
            replicas = self.replica_hold.update(diagnosis.at, sizing)
        return export_state(
            self.advisor,
            self.rules,
            diagnosis,
            several_servers=self.servers.several,
            replicas=replicas,
            cycle_duration_s=self.cycle_duration_s,
            cycle_interval_s=self.cycle_interval_s,
        )

    # ---------------------------------------------------------------- the cycle
    def cycle(self) -> Diagnosis:
        """Scrape once, evaluate, publish. Never raises: whatever goes wrong is one log line
        with the error, a failed scrape in ``scrapes_total``, and a fresh state."""
        started, t0 = self.mono(), time.monotonic()
        if self._cycle_started is not None and started > self._cycle_started:
            gap = started - self._cycle_started
            prev = self.cycle_interval_s
            self.cycle_interval_s = gap if prev is None else 0.7 * prev + 0.3 * gap
        self._cycle_started = self._cycle_running = started
        try:
            return self._cycle()
        except Exception as e:
            return self._cycle_failed(e)
        finally:
            self._cycle_running = None
            self.cycle_duration_s = time.monotonic() - t0
            self._note_slow()

    def _note_slow(self) -> None:
        """One log line when cycles fall behind the interval and one when they catch up again,
        judged on their smoothed duration with some slack (no line per cycle near the edge): the
        advice still stands, it is refreshed less often."""
        dur = self.cycle_duration_s or 0.0
        avg = self._cycle_avg_s = dur if self._cycle_avg_s is None else 0.8 * self._cycle_avg_s + 0.2 * dur
        if not self._slow_logged and avg > self.cfg.interval_s:
            self._slow_logged = True
            log.warning(
                "cycles are slower than the interval",
                cycle_seconds=round(avg, 3),
                interval_s=self.cfg.interval_s,
            )
        elif self._slow_logged and avg < 0.8 * self.cfg.interval_s:
            self._slow_logged = False
            log.info("cycles keep up with the interval again", interval_s=self.cfg.interval_s)

    def _cycle(self) -> Diagnosis:
        t0 = time.monotonic()
        try:
            page = metrics_src.fetch(metrics_url(self.cfg.vllm_url), self.scrape_timeout_s, self.http)
            text, t, dur = page.text, self.clock(), page.duration_s
            err: Exception | None = None
        except metrics_src.MetricsError as e:
            text, t, dur, err = "", self.clock(), time.monotonic() - t0, e
        m = self.mono()
        with self._lock:
            self._check_clock(t, m)
            if err is None and not self._same_server(text, t):
                self._scrape_ok()
                self.advisor.stats.scrapes["other_server"] = (
                    self.advisor.stats.scrapes.get("other_server", 0) + 1
                )
                self.advisor.stats.last_scrape_t = t  # a scrape completed: vLLM is up
                self._scrape_mono = m
            elif err is None:
                ok = self.advisor.on_page(text, t, dur)
                if ok:
                    self._scrape_mono = m
                    self._scrape_ok()
                else:
                    self._scrape_failed("bad page", self.advisor.stats.last_error or "unreadable page")
            else:
                self.advisor.on_scrape_error(err, t)
                self._scrape_failed("scrape failed", str(err))
            try:
                d = self.advisor.diagnose()
            except Exception as e:  # a bug must not kill the daemon: report it and withdraw advice
                log.error("diagnosis failed", error=f"{type(e).__name__}: {e}")
                d = Diagnosis(
                    "insufficient-data",
                    f"internal error: {type(e).__name__}: {e}",
                    None,
                    (),
                    {},
                    {},
                    self.clock(),
                    {},
                )
            if self.servers.several:
                d = Diagnosis(
                    "insufficient-data",
                    self.servers.reason,
                    None,
                    d.findings,
                    d.engine,
                    d.context,
                    d.at,
                    {},
                )
            d = self._name_clock_step(d, m)
            self._state = self._build_state(d)
            self._diag_mono = m
            settled = self.servers.settled()  # not while a switch may be a load balancer
        self._log_status(d)
        if self.persist:
            self._record_experiments(take=settled)
            self._persist(d)
        return d

    def _same_server(self, text: str, t: float) -> bool:
        """False for a page from another server than the one followed (a load balancer in
        front of replicas): it is not fed, and what the switch looked like is undone."""
        was = self.servers.several
        ident = identity.of_page(text)
        progress = identity.progress_of_page(text) if ident is None else None
        same = self.servers.observe(ident, t, progress)
        if self.servers.several and not was:
            since = self.servers.switched_at
            dropped = self.advisor.discard_changes_since(since) if since is not None else 0
            log.warning(
                "several servers",
                error=self.servers.reason,
                url=self.cfg.vllm_url,
                discarded_changes=dropped,
            )
        elif was and not self.servers.several:
            log.info("one server again", url=self.cfg.vllm_url)
        return same

    def _cycle_failed(self, e: Exception) -> Diagnosis:
        error = f"{type(e).__name__}: {e}"
        t = self.clock()
        try:
            if self._lock.acquire(timeout=1.0):
                try:
                    self.advisor.on_scrape_error(e, t)
                    self.advisor.stats.last_error = f"internal error: {error}"
                finally:
                    self._lock.release()
        except Exception:
            pass
        self._scrape_failed("cycle failed", error, level="error")
        d = Diagnosis("insufficient-data", f"internal error: {error}", None, (), {}, {}, t, {})
        self._state = dc_replace(self._build_state(d), up=False)
        self._diag_mono = self.mono()
        self._log_status(d)
        return d

    def _check_clock(self, t: float, m: float) -> None:
        """Name a step of the wall clock (once, when the cycle after it sees it) and restart
        the window on the new time line: pages stamped on both sides of the step cannot be
        ordered, nor a rate taken over it (under the lock)."""
        offset = t - m
        before, self._wall_offset = self._wall_offset, offset
        if before is None or abs(offset - before) <= CLOCK_STEP_S:
            return
        step = offset - before
        self.clock_step, self.clock_steps = (step, m), self.clock_steps + 1
        log.warning(
            "the wall clock stepped",
            step_s=round(step, 3),
            before=_iso(m + before),
            now=_iso(t),
            hint="intervals and staleness are timed on the monotonic clock; the window restarts "
            "on the new time line (no advice until it holds min_window of pages)",
        )
        self.advisor.restart_window(step, t)
        self.advice.close(m + before, f"the wall clock stepped by {step:+.0f} s")
        self.replica_hold = rp.Hold(self.cfg.scale_in_hold_s)
        self.servers = identity.ServerTracker()

    def _name_clock_step(self, d: Diagnosis, m: float) -> Diagnosis:
        """Too little data because the window restarted at a clock step: say why."""
        step = self.clock_step
        if (
            step is None
            or d.status != "insufficient-data"
            or not self.advisor.up
            or m - step[1] > self.cfg.window_s
        ):
            return d
        return dc_replace(
            d,
            reason=f"the wall clock stepped by {step[0]:+.0f} s {m - step[1]:.0f} s ago: the window "
            f"restarted; {d.reason}",
        )

    def _scrape_failed(self, event: str, error: str, level: str = "warning") -> None:
        """One line per distinct failure, not one per cycle (a server down for an hour
        would otherwise write 720 identical lines)."""
        if error == self._last_failure:
            self._repeats += 1
            return
        self._last_failure, self._repeats = error, 0
        getattr(log, level)(event, error=error, url=self.cfg.vllm_url)

    def _scrape_ok(self) -> None:
        if self._last_failure is not None:
            log.info("scrape recovered", url=self.cfg.vllm_url, failed_cycles=self._repeats + 1)
        self._last_failure, self._repeats = None, 0

    def _log_status(self, d: Diagnosis) -> None:
        key = d.status + (d.recommendation.change if d.recommendation else "")
        if key != self.last_logged_status:
            self.last_logged_status = key
            log.info(
                "diagnosis",
                status=d.status,
                reason=d.reason,
                change=d.recommendation.change if d.recommendation else None,
            )

    def _persist(self, d: Diagnosis) -> None:
        """The diagnosis for other tools (STATE_DIR/diagnosis.json); a failure is said once per
        episode (and on /metrics, /healthz), not once per cycle."""
        try:
            path = Path(self.cfg.state_dir)
            path.mkdir(parents=True, exist_ok=True)
            statefile.write_atomic(path / "diagnosis.json", jsonout.dumps(d.to_json(), default=str))
            with self._lock:
                self.advice.save(d.at)
            self._keep_pending(d.at)
        except OSError as e:
            if self.state_ok is not False:
                log.warning(
                    "cannot write state",
                    error=str(e),
                    state_dir=self.cfg.state_dir,
                    hint="the daemon runs on; state writes are retried every cycle "
                    "(vllm_advisor_state_write_ok, /healthz state_ok)",
                )
            self.state_ok, self.state_error = False, str(e)
            return
        if self.state_ok is False:
            log.info("state written again", state_dir=self.cfg.state_dir)
        self.state_ok, self.state_error = True, None

    # ---------------------------------------------------------------- logs
    LOG_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)  # waits between restarts of a log source
    LOG_HEALTHY_S = 60.0  # a source that ran this long starts its backoff afresh

    def _open_follower(self) -> follow.LogFollower | None:
        if self.cfg.log_file:
            return follow.follow_file(self.cfg.log_file, from_start=self.follower is None)
        if self.cfg.log_cmd:
            return follow.follow_command(self.cfg.log_cmd)
        return None

    def _follow_logs(self) -> None:
        """Follow the log source; when it ends (``docker logs -f`` after a container restart)
        or fails, say so once, mark it down and start it again with backoff."""
        failures = 0
        while not self._stop.is_set():
            try:
                follower = self._open_follower()
            except (follow.LogSourceError, OSError, ValueError) as e:
                follower, why = None, str(e)
            if follower is None and not (self.cfg.log_file or self.cfg.log_cmd):
                return
            started = time.monotonic()
            if follower is not None:
                self.follower = follower
                if self._stop.is_set():  # stop() ran while this one was being made
                    follower.close()
                    return
                why = self._drain(follower)
            self.log_source_up = False
            if self._stop.is_set():
                return
            failures = 0 if time.monotonic() - started >= self.LOG_HEALTHY_S else failures + 1
            backoff = self.LOG_BACKOFF_S[min(max(failures - 1, 0), len(self.LOG_BACKOFF_S) - 1)]
            self.log_source_restarts += 1
            log.warning("log source ended; restarting", detail=why, retry_in_s=backoff)
            self._stop.wait(backoff)

    def _drain(self, follower: follow.LogFollower) -> str:
        """Feed the follower's lines until it ends; returns why it ended."""
        lines0, bytes0 = self.log_skipped_lines, self.log_skipped_bytes
        try:
            for line in follower.lines():
                self.log_source_up = True
                if follower.skips or self._log_behind is not None:
                    self._note_behind(follower, lines0, bytes0)
                events = self.advisor.parse_log_line(line)  # outside the lock: parsing may take long
                if events:
                    with self._lock:
                        self.advisor.apply_log_events(events)
        except follow.LogSourceError as e:
            return str(e)
        except Exception as e:
            return f"log follower failed: {type(e).__name__}: {e}"
        if isinstance(follower, follow.CommandFollower):
            return follower.describe_exit()
        return "the log source ended"

    def _note_behind(self, follower: follow.LogFollower, lines0: int, bytes0: int) -> None:
        """The log reader fell behind its source and skipped to the tail: one line when that
        begins, one when it reads at the tail again (with what the episode skipped)."""
        before = (self.log_skipped_lines, self.log_skipped_bytes)
        self.log_skipped_lines = lines0 + follower.skipped_lines
        self.log_skipped_bytes = bytes0 + follower.skipped_bytes
        if follower.behind and self._log_behind is None:
            self._log_behind = before
            log.warning(
                "the log reader fell behind its source; skipping to the tail",
                skipped_lines=self.log_skipped_lines - before[0],
                skipped_bytes=self.log_skipped_bytes - before[1],
                hint="the log grows faster than its lines are read: what is skipped is counted "
                "(vllm_advisor_log_skipped_lines_total) and the latest lines are read",
            )
        elif not follower.behind and self._log_behind is not None:
            lines_then, bytes_then = self._log_behind
            self._log_behind = None
            log.info(
                "the log reader is at the tail again",
                skipped_lines=self.log_skipped_lines - lines_then,
                skipped_bytes=self.log_skipped_bytes - bytes_then,
            )

    def _start_logs(self) -> None:
        if not (self.cfg.log_file or self.cfg.log_cmd):
            return
        self.log_source_up = False
        th = threading.Thread(target=self._follow_logs, name="log-follower", daemon=True)
        th.start()
        self._threads.append(th)

    # ---------------------------------------------------------------- the pages
    def charts(self) -> timeseries.Charts | None:
        """The window's key series for the page (read under the lock; None when a cycle holds
        it for longer than a page should wait)."""
        if not self._lock.acquire(timeout=PAGE_WAIT_S):
            return None
        try:
            return timeseries.charts(self.advisor.window, self.advisor.engine, self.cfg.targets)
        finally:
            self._lock.release()

    def history(self) -> History:
        """``/history``: the ledger's experiments (with those judged but not yet written) and the
        advice given before, newest first, each saying where it is kept."""
        with self._lock:
            advice = self.advice.newest_first()
            advice_error = self.advice.error
        d = self.state().diagnosis  # withdrawn at reading time when the cycle stalls: say so here too
        if (
            advice
            and advice[0].ended is None
            and (d is None or d.recommendation is None or d.status != "advice")
        ):
            why = f"{d.status}: {d.reason}" if d is not None else "no diagnosis"
            advice = (dc_replace(advice[0], ended=self.clock(), end_reason=why), *advice[1:])
        with self._ledger_lock:
            queued = [asdict(r) for r in self.ledger.queue] if self.ledger is not None else []
            judged = [asdict(r) for r in self.judged]
        error = None
        if self.ledger is None:
            rows = list(reversed(judged))
            kept = "Judged by this process and kept in memory: a replay or the demo writes no ledger."
        else:
            rows = list(reversed(queued))
            kept = (
                f"The ledger {self.ledger_path} (vllm-advisor history prints it), newest first"
                + (f"; {len(queued)} judged, not yet written (retried every cycle)" if queued else "")
                + "."
            )
            if self.ledger.damage:
                error = f"The ledger is damaged ({self.ledger.damage[0]}): it is not read or written."
            elif Path(self.ledger_path).exists():
                try:
                    rows += Ledger(self.ledger_path, timeout_s=1.0, read_only=True).list(HISTORY_ROWS)
                except LedgerError as e:
                    error = str(e)
        if self.advice.path is not None:
            advice_kept = f"Kept in {self.advice.path} (the last {self.advice.limit}), newest first."
        else:
            advice_kept = f"Kept in memory by this process (the last {self.advice.limit}), newest first."
        if advice_error:
            error = (error + " " if error else "") + advice_error
        return History(tuple(rows[:HISTORY_ROWS]), advice, kept, advice_kept, error)

    def pages(self) -> PageSources:
        return PageSources(self.charts, self.history, self.cfg.interval_s)

    # ---------------------------------------------------------------- lifecycle
    def serve(self) -> tuple[str, int]:
        host, port = parse_listen(self.cfg.listen)
        self.server = make_server(host, port, self.state, self.pages())
        th = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)
        th.start()
        self._threads.append(th)
        addr = self.server.server_address
        return str(addr[0]), int(addr[1])

    def start(self) -> tuple[str, int]:
        addr = self.serve()
        self._start_logs()
        th = threading.Thread(target=self._run_cycles, name="cycles", daemon=True)
        th.start()
        self._threads.append(th)
        log.info(
            "started",
            vllm_url=self.cfg.vllm_url,
            listen=f"{addr[0]}:{addr[1]}",
            interval_s=self.cfg.interval_s,
            log_file=self.cfg.log_file,
            log_cmd=bool(self.cfg.log_cmd),
        )
        return addr

    def _run_cycles(self) -> None:
        """A cycle every ``interval`` from the start of the one before, on the monotonic clock
        (time.monotonic: the real one, whatever clock the state is stamped with); one that ran
        longer is followed at once by the next (the runs missed are not made up: one cycle
        reads the latest page). Slow cycles are said once per episode (``_note_slow``)."""
        while not self._stop.is_set():
            t0 = time.monotonic()
            self.cycle()
            self._stop.wait(max(0.0, self.cfg.interval_s - (time.monotonic() - t0)))

    def stop(self) -> None:
        """Stop within seconds whatever vLLM does: fetches in flight are aborted, the cycle
        thread is not waited for beyond a short grace."""
        self._stop.set()
        self.http.abort()
        if self.follower is not None:
            self.follower.close()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        deadline = time.monotonic() + 3.0
        for th in self._threads:
            th.join(timeout=max(0.0, deadline - time.monotonic()))
        self._interrupt_pending()
        self._flush_ledger_at_exit()
        self._close_advice()
        log.info("stopped")

    def _close_advice(self) -> None:
        """The advice standing when the daemon stops ends then (and is written, if kept)."""
        if not self._lock.acquire(timeout=1.0):
            return
        try:
            self.advice.close(self.clock(), "the daemon stopped")
            if self.persist:
                self.advice.save(self.clock())
        except OSError as e:
            log.warning("cannot write the advice history", error=str(e), state_dir=self.cfg.state_dir)
        finally:
            self._lock.release()

    def wait(self, seconds: float | None = None) -> None:
        """Block until SIGINT/SIGTERM (or ``seconds``)."""
        _install_signals(self._stop, self.http.abort)
        self._stop.wait(seconds)


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="seconds")


def _install_signals(stop: threading.Event, abort: Callable[[], None] | None = None) -> None:
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: object) -> None:
        stop.set()
        if abort is not None:
            abort()  # a fetch in flight ends now, not at its deadline

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


class StateDirLock:
    """One daemon per state dir: an exclusive ``flock`` on ``STATE_DIR/daemon.lock`` held for
    the daemon's life (the kernel lets go when the process ends, however it ends). The file
    holds the holder's pid, for the message a second daemon gives."""

    NAME = "daemon.lock"

    def __init__(self, state_dir: str) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / self.NAME
        self._fd: int | None = None
        self.pid_error: str | None = None  # the pid could not be written (ENOSPC)

    def acquire(self) -> bool:
        """True when held; False when the state dir cannot hold a lock file (unusable: the
        daemon runs, its writes queue). Raises DaemonError when another daemon holds it."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = statefile.open_fd(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # never through a link
        except statefile.UnsafePath as e:
            raise DaemonError(str(e)) from None
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            finally:
                os.close(fd)
            raise DaemonError(
                f"another vllm-advisor daemon (pid {holder}) uses the state dir {self.dir}: give "
                "each daemon its own --state-dir (two would write the same ledger twice)"
            ) from None
        self._fd = fd  # held: the pid below only serves a second daemon's message
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as e:  # a full disk: the lock holds all the same; the cycle's writes say it
            self.pid_error = str(e)
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def run(cfg: Config, rules: Sequence[Rule], run_seconds: float | None = None) -> int:
    configure_logging()
    stop = threading.Event()
    client = http_src.Client()
    _install_signals(stop, client.abort)  # before anything talks to vLLM: SIGTERM always works
    lock = StateDirLock(cfg.state_dir)
    try:
        if not lock.acquire():
            log.warning(
                "cannot lock the state dir; running without it",
                state_dir=cfg.state_dir,
                hint="its writes queue until it is usable",
            )
    except DaemonError:
        raise  # the caller says it in one line (the CLI's `error:` line), not a log line before it
    try:
        return _run_locked(cfg, rules, run_seconds, stop, client)
    finally:
        lock.release()


def _run_locked(
    cfg: Config, rules: Sequence[Rule], run_seconds: float | None, stop: threading.Event, client: Any
) -> int:
    d = Daemon(cfg, rules, http=client)
    d._stop = stop
    if stop.is_set():
        log.info("stopped", during="start-up")
        return 0
    try:
        d.start()
    except OSError as e:
        raise DaemonError(f"cannot listen on {cfg.listen}: {e.strerror or e}") from None
    try:
        d.wait(run_seconds)
    finally:
        d.stop()
    return 0


# ------------------------------------------------------------------ replaying a session live
def run_replay(
    cfg: Config, rules: Sequence[Rule], session_dir: str, speed: float, run_seconds: float | None = None
) -> int:
    """Serve the exporter while a recorded session plays at ``speed`` (as if live), then hold
    the final state until stopped, or until ``run_seconds`` after the start (mid-replay too).
    The replay's clock starts at its first page (the log before it is read at once). Advice
    withdrawal by staleness is measured on the replayed clock, so the final state stays what
    the session ended with."""

    configure_logging()
    try:
        s = Session.load(session_dir)
    except SessionError as e:
        log.error("cannot load session", error=str(e))
        return 1

    adv, clock = advisor_for_session(s, cfg, rules)
    # a replay writes nothing into the state dir (a live daemon's may be there): its ledger and
    # advice history stay in memory
    daemon = Daemon(cfg, rules, advisor=adv, clock=clock, persist=False)
    try:
        host, port = daemon.serve()
    except OSError as e:
        raise DaemonError(f"cannot listen on {cfg.listen}: {e.strerror or e}") from None
    log.info("replaying", session=session_dir, speed=speed, listen=f"{host}:{port}")
    _install_signals(daemon._stop)
    deadline = None if run_seconds is None else time.monotonic() + run_seconds

    def left() -> float | None:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    try:

        def pause(x: float) -> None:
            rest = left()
            daemon._stop.wait(x if rest is None else min(x, rest))
            if left() == 0.0:
                daemon._stop.set()

        for item in s.replay(speed=speed, sleep=pause):
            if daemon._stop.is_set():
                break
            with daemon._lock:
                if item.kind == "scrape" and item.t is not None:
                    clock.t = item.t
                    adv.on_page(item.text, item.t)
                    d = adv.diagnose(item.t)
                    daemon._state = daemon._build_state(d)
                    daemon._log_status(d)
                else:
                    adv.on_log_line(item.text)
            daemon._record_experiments()
        if not daemon._stop.is_set():
            log.info("replay finished; holding the final state")
            daemon._stop.wait(left())
    finally:
        daemon.stop()
    return 0


def serve_static(
    adv: Advisor, d: Diagnosis, cfg: Config, seconds: float | None, advice: AdviceHistory | None = None
) -> int:
    """Serve one fixed diagnosis (the demo) until Ctrl-C or ``seconds``; 1 if it cannot listen.
    ``advice``: the advice given while the session was replayed (``/history``; in memory, like
    the experiments judged in it: the demo writes nothing into the state dir)."""
    daemon = Daemon(cfg, adv.evaluator.rules, advisor=adv, clock=lambda: d.at, persist=False)
    if advice is not None:
        daemon.advice = advice
    daemon._state = daemon._build_state(d)
    daemon._record_experiments()
    try:
        host, port = daemon.serve()
    except OSError as e:
        print(f"error: cannot serve the exporter on {cfg.listen}: {e}", file=sys.stderr)
        return 1
    print(
        f"\nPage: http://{host}:{port}/  (the diagnosis beside charts of the window; "
        f"/history: the advice given)\n"
        f"Exporter: http://{host}:{port}/metrics  ·  JSON: http://{host}:{port}/api/v1/diagnosis\n"
        "Serving until Ctrl-C.",
        flush=True,
    )
    _install_signals(daemon._stop)
    try:
        daemon._stop.wait(seconds)
    finally:
        daemon.stop()
    return 0


# ------------------------------------------------------------------ explain helpers
class DaemonError(Exception):
    pass


def fetch_diagnosis(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    u = urls.join(url, "/api/v1/diagnosis")
    try:
        r = http_src.Client().get(u, timeout_s)
        if r.status_code != 200:
            raise http_src.FetchError("http", f"HTTP {r.status_code} {r.reason}".strip(), u)
        data = r.json()
    except (http_src.FetchError, ValueError) as e:
        raise DaemonError(f"cannot read the advisor daemon at {u}: {e}") from None
    if not isinstance(data, dict) or "status" not in data:
        raise DaemonError(f"{u}: not an advisor diagnosis")
    return data


def observe(
    url: str,
    cfg: Config,
    rules: Sequence[Rule],
    window_s: float,
    interval_s: float,
    engine_config: str | None = None,
    progress: bool | None = None,
    sleep: Callable[[float], None] = time.sleep,
    command: cmdline_src.PastedCommand | None = None,
) -> Diagnosis:
    """Watch a live server for ``window_s`` (``explain --url``) and diagnose it (``command``:
    the server's launch command as pasted, instead of the process found on this host)."""
    return observe_advisor(url, cfg, rules, window_s, interval_s, engine_config, progress, sleep, command)[1]


SLOW_LAST_RETRIES = 3


def _timed_out_last(daemon: Daemon) -> bool:
    outages = daemon.advisor.window.outages()
    return bool(outages) and outages[-1].kind == "timeout"


def observe_advisor(
    url: str,
    cfg: Config,
    rules: Sequence[Rule],
    window_s: float,
    interval_s: float,
    engine_config: str | None = None,
    progress: bool | None = None,
    sleep: Callable[[float], None] = time.sleep,
    command: cmdline_src.PastedCommand | None = None,
) -> tuple[Advisor, Diagnosis]:
    """:func:`observe`, with the advisor that watched (its window sizes the replicas)."""

    cfg = cfg.with_overrides(
        vllm_url=url,
        interval_s=interval_s,
        engine_config=engine_config,
        window_s=max(window_s, cfg.min_window_s),
    )
    daemon = Daemon(cfg, rules, persist=False)
    if command is not None:  # issue 14 (paste): --command-file
        daemon.advisor.argv = command.argv
        daemon.advisor.argv_provider = lambda: command.argv
        daemon.advisor.base.update(command.facts())
    n = max(2, int(window_s / interval_s) + 1)
    show = sys.stderr.isatty() if progress is None else progress
    d: Diagnosis | None = None
    with Progress(
        TextColumn("observing {task.description}"),
        BarColumn(),
        TimeRemainingColumn(),
        disable=not show,
        transient=True,
        console=None,
    ) as bar:
        task = bar.add_task(url, total=n)
        for i in range(n):
            d = daemon.cycle()
            bar.advance(task)
            if i == 0 and not daemon.advisor.up and daemon.advisor.stats.scrapes.get("refused"):
                # nothing listens: say so now rather than after the whole window; a page that
                # was slow to come (a busy server) is not that, and the next ones may come
                break
            if i < n - 1:
                sleep(interval_s)
        # pages lost past their deadline, or cycles stretched on a busy machine, leave the window
        # the diagnosis reads (its last ``--window`` seconds) short of what it needs (make test
        # runs: "only 16s of data (need 20s)", then "only 17s" from a watch whose frames spanned
        # more than 20 s in all, which is what this checked before): watch on while it is short,
        # one interval at a time, one more window at most
        want = min(window_s, cfg.min_window_s)
        for extra in range(1, n + 1 if daemon.advisor.stats.scrapes.get("success") else 1):
            if daemon.advisor.window.duration(cfg.window_s) >= want:
                break
            bar.update(task, total=n + extra)
            sleep(interval_s)
            d = daemon.cycle()
            bar.advance(task)
        # a last page that came too late (a busy server) is a slow server, not a down one: a
        # window of good pages is not thrown away for it; ask again, a few intervals at most
        for _ in range(SLOW_LAST_RETRIES):
            if daemon.advisor.up or not _timed_out_last(daemon):
                break
            sleep(interval_s)
            d = daemon.cycle()
    assert d is not None
    if not daemon.advisor.stats.scrapes.get("success"):
        raise DaemonError(
            f"not one /metrics page could be read from {url}: {daemon.advisor.stats.last_error}"
        )
    return daemon.advisor, d
