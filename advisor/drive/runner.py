"""The advisor's state machine, shared by the daemon, ``explain`` and replays.

It takes pages, scrape failures and log lines as they come (live or replayed),
keeps the window, what the engine runs with and the knob changes it noticed, and
produces a :class:`~advisor.advise.Diagnosis` on request. No threads, no sleeps:
the daemon drives it on a timer, a replay drives it as fast as it likes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from typing import Any

from advisor.core import engine_json, knobs
from advisor.core.config import Config
from advisor.core.model import EngineInfo, LogEvent, ParseWarning, Provenanced, Snapshot
from advisor.derive import sketches
from advisor.derive.signals import Context, latency_sources
from advisor.derive.window import Outage, Window
from advisor.diagnose.advise import Diagnosis, diagnose
from advisor.diagnose.evaluate import Evaluator
from advisor.diagnose.ruleset import Rule
from advisor.outputs.state import ExportState
from advisor.predict import scoring, simulated
from advisor.predict.intake import Intake
from advisor.sources import engine, logs, logwrap
from advisor.sources import engine_config as engine_config_src
from advisor.sources import logfacts as logfacts_src
from advisor.sources.metrics import MetricsError, checked, parse_page
from advisor.verify import live_experiment as lx

# Knobs whose change is an experiment (the engine restarted with a different value).
TRACKED_KNOBS = tuple(k for k in knobs.KNOBS if k != "replicas")
MAX_STARTUP_EVENTS = 500
MAX_KEPT_LINE_CHARS = 512  # raw text kept per log event (a 64 KB line x 20,000 events was 1.2 GB)


@dataclass(frozen=True)
class KnobChange:
    t: float
    knob: str
    old: Any
    new: Any
    source: str | None

    def to_json(self) -> dict[str, Any]:
        return {"t": self.t, "knob": self.knob, "old": self.old, "new": self.new, "source": self.source}


@dataclass
class Stats:
    scrapes: dict[str, int] = field(default_factory=dict)  # result -> count
    log_lines: dict[str, int] = field(default_factory=dict)  # event kind -> count
    last_scrape_t: float | None = None
    last_scrape_duration_s: float | None = None
    last_error: str | None = None
    page_warnings: int = 0  # parts of pages skipped as unreadable (model.ParseWarning), all pages
    bad_samples: dict[str, int] = field(default_factory=dict)  # ParseWarning.kind -> count, all pages
    page_skipped: dict[str, int] = field(default_factory=dict)  # the last page: samples not kept, by why


REPLAYED = "a replay simulates its last decision only"


class Advisor:
    """One vLLM server's advisor state. Not thread-safe: the daemon serialises calls."""

    def __init__(
        self,
        cfg: Config,
        rules: Sequence[Rule],
        *,
        base: Mapping[str, Provenanced] | None = None,
        config_path: str | None = None,
        argv_provider: Callable[[], Sequence[str] | None] | None = None,
        clock: Callable[[], float] = time.time,
        log_near: float | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        self.window = Window(max_age_s=cfg.retention_s, clock=clock)
        self.intake = Intake()  # the model's facts, page by page, over the window's span
        self.recent = simulated.Recent()  # the last decision's simulations (at most every 15 s)
        self.standing: str | None = None  # the rule the last decision advised (hysteresis)
        # decisions before this time are scored by the closed form (a replay's, but its last)
        self.simulate_from = -math.inf
        self.evaluator = Evaluator(list(rules), dict(cfg.targets))
        self.base = dict(base or {})
        self.config_path = config_path
        self.argv_provider = argv_provider
        self.argv: Sequence[str] | None = argv_provider() if argv_provider else None
        self.log_near = log_near  # year-less log stamps take the year nearest this (default: now)
        self.joiner = logwrap.LineJoiner()
        self.startup_events: list[LogEvent] = []
        self._run_first: LogEvent | None = None  # the first start-up event of the log's current run
        # the engine as it stood when the log showed a new run start after another
        self._engine_before_run: EngineInfo | None = None
        self.stats = Stats()
        self.up = False
        self.changes: list[KnobChange] = []
        self.last_change_t: float | None = None
        self._seen_restarts: set[float] = set()
        self.experiment: lx.LiveExperiment | None = None
        self.finished_experiments: list[lx.LiveExperiment] = []  # drained by the daemon (ledger)
        self._latest_good: Snapshot | None = None
        self.last_page_warnings: tuple[ParseWarning, ...] = ()  # what the last page's parse skipped
        self.input_warnings: list[str] = []  # one line each, for the user (inputs.from_files)
        self.engine = self._resolve()

    # ---------------------------------------------------------------- inputs
    def on_page(self, text: str, t: float, duration_s: float | None = None) -> bool:
        """A fetched page. Returns False (and counts why) when it cannot be read."""
        try:
            snap = parse_page(text, t)
        except MetricsError as e:
            self.on_scrape_error(e, t)
            return False
        return self.on_snapshot(snap, duration_s)

    def on_snapshot(self, snap: Snapshot, duration_s: float | None = None) -> bool:
        """A page already parsed (or rebuilt from a Prometheus's samples), taken at ``snap.t``."""
        snap = checked(snap)  # what a parsed page's readings pass, a rebuilt one's must too
        t = snap.t
        # what the page showed that was not read (a broken line, NaN, a duplicate series), and
        # what only the pages before it show (a counter that went down without a restart)
        bad = (*snap.warnings, *self.window.add_snapshot(snap))
        self.intake.add(snap)
        if self.window.oldest_t is not None:
            self.intake.expire_before(self.window.oldest_t)
        # a page read with parts skipped is a "bad_sample" scrape
        self._count_scrape("bad_sample" if bad else "success")
        self.last_page_warnings = bad
        self.stats.page_warnings += len(bad)
        for w in bad:
            self.stats.bad_samples[w.kind] = self.stats.bad_samples.get(w.kind, 0) + 1
        for k, n in snap.skipped.items():
            self.stats.page_skipped[k] = n  # the last page's
        self.up = True
        self.stats.last_scrape_t = t
        self.stats.last_scrape_duration_s = duration_s
        self.stats.last_error = None
        first = self._latest_good is None
        self._latest_good = snap
        restarts = [r for r in self.window.restart_times() if r not in self._seen_restarts]
        if restarts or first:
            self._seen_restarts.update(restarts)
            if self.argv_provider is not None and (restarts or self.argv is None):
                self.argv = self.argv_provider()
            self._refresh_engine(t, restarted=bool(restarts))
        return True

    def note_bad_samples(self, warnings: Sequence[ParseWarning], t: float) -> None:
        """Bad readings that came beside the pages (a sidecar's knob series read from
        Prometheus, G5): named in the window and counted like a page's."""
        self.window.add_bad_samples(t, warnings)
        self.stats.page_warnings += len(warnings)
        for w in warnings:
            self.stats.bad_samples[w.kind] = self.stats.bad_samples.get(w.kind, 0) + 1

    def restart_window(self, step_s: float, t: float) -> None:
        """The wall clock stepped by ``step_s`` (an NTP step, a hand-set clock), ``t`` being the
        first reading after it: what the window holds is stamped on the old time line, so it
        starts again empty (new pages cannot be ordered against the old ones, and a rate over
        the step would be wrong by the step); the rules' hold times start again. Knob changes
        are re-based onto the new time line (their observation period keeps its length); an
        experiment being observed compares windows on both sides of the step, so it ends,
        inconclusive, saying so."""
        self.window = Window(max_age_s=self.cfg.retention_s, clock=self.clock)
        self.intake = Intake()
        self.recent = simulated.Recent()
        self.standing = None
        self.evaluator.reset()
        self._seen_restarts.clear()
        self.changes = [dc_replace(c, t=c.t + step_s) for c in self.changes]
        if self.last_change_t is not None:
            self.last_change_t += step_s
        exp = self.experiment
        if exp is not None and exp.state == "observing":
            self.finished_experiments.append(
                dc_replace(
                    exp,
                    state="done",
                    verdict="inconclusive",
                    ended_at=t,
                    reasons=(f"The wall clock stepped by {step_s:+.0f} s while it was observed.",),
                )
            )
            self.experiment = None

    def on_scrape_error(self, err: MetricsError | Exception, t: float) -> None:
        kind = err.kind if isinstance(err, MetricsError) else "error"
        self._count_scrape(kind)
        self.up = False
        self.stats.last_error = str(err)
        self.window.add_outage(Outage(t, kind, str(err)))

    def on_log_line(self, line: str) -> None:
        self.apply_log_events(self.parse_log_line(line))

    def parse_log_line(self, line: str) -> list[LogEvent]:
        """The events of one raw log line (hard-wrapped lines joined first). It touches no state
        but the line joiner, which only the one log reader feeds: the daemon calls it outside
        its lock, so a line that takes long to parse never holds up a scrape cycle."""
        return [logs.parse_line(joined, near=self.log_near) for joined in self.joiner.feed(line)]

    def flush_logs(self) -> None:
        self.apply_log_events([logs.parse_line(j, near=self.log_near) for j in self.joiner.flush()])

    def apply_log_events(self, events: Iterable[LogEvent]) -> None:
        """Parsed log events into the window and the engine's facts (under the daemon's lock)."""
        for ev in events:
            self._on_event(ev)

    def _on_event(self, ev: LogEvent) -> None:
        self.stats.log_lines[ev.kind] = self.stats.log_lines.get(ev.kind, 0) + 1
        if ev.kind == "unknown":
            return
        if len(ev.line) > MAX_KEPT_LINE_CHARS:  # the parsed fields are kept; the raw text only as provenance
            ev = dc_replace(ev, line=ev.line[:MAX_KEPT_LINE_CHARS])
        self.window.add_event(ev)
        if ev.kind == "startup":
            self.startup_events.append(ev)
            if len(self.startup_events) > MAX_STARTUP_EVENTS:
                # keep the current run only: the last restart boundary onwards
                runs = logfacts_src.split_at_restarts(self.startup_events)
                self.startup_events = runs[-1] if runs else []
            runs = logfacts_src.split_at_restarts(self.startup_events)
            first = runs[-1][0] if runs and runs[-1] else None
            if first is not self._run_first:
                if self._run_first is not None:
                    self._engine_before_run = self.engine
                self._run_first = first
            self._refresh_engine(ev.t or self.clock(), restarted=False)

    def _count_scrape(self, result: str) -> None:
        self.stats.scrapes[result] = self.stats.scrapes.get(result, 0) + 1

    # ---------------------------------------------------------------- engine
    def _resolve(self) -> EngineInfo:
        try:
            return engine.resolve(
                config_path=self.config_path,
                argv=self.argv,
                events=self.startup_events,
                snapshot=self._latest_good,
                host=self.base,
            )
        except engine_config_src.EngineSourceError as e:
            self.stats.last_error = f"engine config: {e}"
            return engine.resolve(events=self.startup_events, snapshot=self._latest_good, host=self.base)

    def refresh_engine(self, t: float) -> None:
        """Resolve the engine again now (new facts, no restart): a default replaced by a value
        read is learning, not a change."""
        self._refresh_engine(t, restarted=False)

    def _refresh_engine(self, t: float, restarted: bool) -> None:
        old = self.engine
        new = self._resolve()
        self.engine = new
        changed = []
        # Once the log shows a new run's arguments, the new knobs are set against the run before
        # as it stood (self._engine_before_run), not against what the new run's first lines
        # resolved alone (defaults, which would hide a change to the default's value and take a
        # value set anew for one learned). A value the new run's arguments set where the run
        # before had another (its default included: DP 1 -> `--data-parallel-size 2`, read before
        # the first page of the new server) is a change.
        read = self._engine_before_run is not None and self._startup_restarted()
        ref = self._engine_before_run if read and self._engine_before_run is not None else old
        for k in TRACKED_KNOBS:
            a, b = ref.values.get(k), new.values.get(k)
            if a is None or b is None or a.value == b.value:
                continue
            set_anew = read and b.source == "log" and b.detail == "non-default args"
            if a.source == "default" and b.source != "default" and not restarted and not set_anew:
                continue  # learned the real value, not a change
            if a.source == "default" and b.source == "default" and not restarted:
                # a default derived again from facts learned since (the device, from a new run's
                # start-up lines read one by one): the server set neither
                continue
            changed.append(KnobChange(t, k, a.value, b.value, b.source))
        if read:
            self._engine_before_run = None
        if changed and (restarted or self._startup_restarted()):
            self.changes.extend(changed)
            self.last_change_t = t
            self.evaluator.reset()
            # a change the log shows before the new server's first page starts at its line, not
            # at a restart seen before it
            restart_t = max(self._seen_restarts, default=t) if restarted else t
            prev = self.experiment.after_start if self.experiment is not None else None
            if self.experiment is not None and self.experiment.state == "observing":
                # changed again before the verdict: that experiment is void
                self.finished_experiments.append(
                    dc_replace(
                        self.experiment,
                        state="done",
                        verdict="inconclusive",
                        ended_at=t,
                        reasons=("The engine changed again before enough requests were seen.",),
                    )
                )
            self.experiment = lx.start(
                self.window, [lx.Change(c.knob, c.old, c.new, c.source) for c in changed], restart_t, prev
            )
            self.experiment = dc_replace(self.experiment, prediction=self._predict(old, changed, t))

    def _predict(self, old: EngineInfo, changed: Sequence[KnobChange], t: float) -> dict[str, Any] | None:
        """What the model predicted for this change, from the window before it (one knob only):
        simulated as the decisions at ``t`` are (a replay's before its answer are not)."""

        exp = self.experiment
        if len(changed) != 1 or exp is None:
            return None
        c = changed[0]
        before = scoring.Observed.between(self.intake, self.window, *exp.before)
        simulate = t >= self.simulate_from
        return scoring.predict_change(before, old, self.cfg.targets, c.knob, c.new, simulate=simulate)

    def discard_changes_since(self, t: float) -> int:
        """Forget knob changes noticed at ``t`` or later, and the experiments they started: they
        were another server behind the same URL, not changes (the daemon's several-servers
        check). Returns how many changes were dropped."""
        kept = [c for c in self.changes if c.t < t]
        dropped = len(self.changes) - len(kept)
        if dropped:
            self.changes = kept
            self.last_change_t = max((c.t for c in kept), default=None)
            self.experiment = None
        self.finished_experiments = [
            e for e in self.finished_experiments if e.after_start < t and (e.ended_at or t) < t
        ]
        return dropped

    def _startup_restarted(self) -> bool:
        """The log shows a new run whose arguments are known (its `non-default args` line):
        only then is a difference in knob values a change, not a half-read start-up."""
        runs = logfacts_src.split_at_restarts(self.startup_events)
        return len(runs) > 1 and any(ev.fields.get("fact") == "non_default_args" for ev in runs[-1])

    # ---------------------------------------------------------------- output
    def advance_experiment(self, now: float) -> None:
        """Count the experiment being observed up to ``now`` and judge it once it has seen
        enough (what each diagnosis does first; a replay that wants the verdict alone calls it
        instead)."""
        exp = self.experiment
        if exp is None or exp.state == "done":
            return
        exp = lx.advance(
            exp, self.window, now, max_wait_s=self.cfg.experiment_max_wait_s, targets=self.cfg.targets
        )
        if exp.state == "done" and exp.prediction is not None:
            after = scoring.Observed.between(self.intake, self.window, exp.after_start, now)
            judged = scoring.prediction_error(exp.prediction, after, self.engine, self.cfg.targets)
            note = scoring.speed_note(judged.get("steps"))
            exp = dc_replace(exp, prediction=judged)
            if note:
                exp = lx.with_reason(exp, note)
        self.experiment = exp
        if exp.state == "done":
            self.finished_experiments.append(exp)

    def diagnose(self, now: float | None = None) -> Diagnosis:
        now = self.clock() if now is None else now
        self.advance_experiment(now)
        exp = self.experiment
        observing = exp is not None and exp.state == "observing"
        # one change at a time: while an experiment runs, no new advice; once it is judged,
        # advice may resume; a change without an experiment waits observe_after_change_s
        last_change = now if observing else (self.last_change_t if exp is None else None)
        obs = scoring.Observed.of(self.intake, self.window, self.cfg.window_s)
        recent = self.recent if now >= self.simulate_from else simulated.Recent.off(REPLAYED)
        d = diagnose(
            self.window, self.engine, self.evaluator, self.cfg, now, last_change, obs, recent, self.standing
        )
        plugin = self.plugin_context()
        if plugin:
            d = dc_replace(d, context={**d.context, **plugin})
        if exp is not None:
            d = dc_replace(d, experiment=exp.to_json())
        if observing and d.status == "insufficient-data" and "knob changed" in d.reason and exp is not None:
            d = dc_replace(
                d,
                reason=f"experiment running: {exp.knob} {exp.changes[0].old} -> {exp.changes[0].new}, "
                f"{exp.after_requests:.0f} of ~{exp.before_requests:.0f} requests seen; "
                "no new advice until it is judged",
            )
        if not self.up and self.stats.last_error:
            d = dc_replace(
                d,
                status="insufficient-data",
                reason=f"vLLM cannot be read: {self.stats.last_error}",
                recommendation=None,
                gate="vllm-down",
            )
        rec = d.recommendation
        self.standing = rec.rule if d.status == "advice" and rec is not None else None
        return d

    def plugin_context(self) -> dict[str, Any]:
        """With the stat-logger plugin's series on the pages: the plugin (``plugin``), where each
        latency's quantiles come from (``latency_sources``) and every latency by request-length
        bucket over the evaluation window (``latency_by_bucket``); empty without the plugin."""
        info = sketches.plugin_info(self.window)
        if info is None:
            return {}
        ctx = Context(self.window, self.engine, self.cfg.window_s, dict(self.cfg.targets))
        return {
            "plugin": info.to_json(),
            "latency_sources": latency_sources(ctx),
            "latency_by_bucket": [r.to_json() for r in sketches.by_bucket(self.window, self.cfg.window_s)],
        }


def replay(
    advisor: Advisor,
    items: Iterable[tuple[str, float | None, str]],
    on_diagnosis: Callable[[float, Diagnosis], None] | None = None,
    evaluate_every: int = 1,
) -> Diagnosis | None:
    """Feed ("scrape", t, page) / ("log", t, line) items; diagnose after each scrape (every
    ``evaluate_every`` scrapes) as the daemon would. The clock of ``advisor`` should follow
    the replayed time (see :class:`ReplayClock`). Returns the last diagnosis."""
    last: Diagnosis | None = None
    n = 0
    for kind, t, payload in items:
        if kind == "scrape" and t is not None:
            if isinstance(advisor.clock, ReplayClock):
                advisor.clock.t = t
            advisor.on_page(payload, t)
            n += 1
            if n % evaluate_every == 0:
                last = advisor.diagnose(t)
                if on_diagnosis is not None:
                    on_diagnosis(t, last)
        elif kind == "log":
            advisor.on_log_line(payload)
    advisor.flush_logs()
    return last


class ReplayClock:
    """A clock that a replay moves forward with the recorded time."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def base_from_session_engine(data: Mapping[str, Any], has_argv: bool = False) -> dict[str, Provenanced]:
    """What a recorded ``engine.json`` knew from outside the logs and pages (config file, host
    probe, and the command line unless the session's ``serve_args`` give it afresh); the rest
    is re-derived while replaying."""
    if not data:
        return {}
    info = engine_json.from_json(data)
    keep = ("config",) if has_argv else ("config", "cmdline")
    return {k: v for k, v in info.values.items() if v.source in keep or "host" in (v.detail or "")}


def export_state(
    adv: Advisor, rules: tuple[Rule, ...], diagnosis: Diagnosis | None, **extra: Any
) -> ExportState:
    """The state of one advisor (its counters as they are now) with ``diagnosis``."""
    return ExportState(
        diagnosis=diagnosis,
        up=adv.up,
        rules=rules,
        scrapes=dict(adv.stats.scrapes),
        log_lines=dict(adv.stats.log_lines),
        last_scrape_t=adv.stats.last_scrape_t,
        last_scrape_duration_s=adv.stats.last_scrape_duration_s,
        knob_changes=len(adv.changes),
        experiment=diagnosis.experiment if diagnosis is not None else None,
        bad_samples=dict(adv.stats.bad_samples),
        page_skipped=dict(adv.stats.page_skipped),
        **extra,
    )
