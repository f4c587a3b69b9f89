"""The fleet daemon: every vLLM server a Prometheus scrapes, advised from one place.

``vllm-advisor run --prometheus URL [--selector '{job="vllm"}']``: each cycle asks Prometheus
which vLLM servers (``instance``, with their models and engines) are behind the selector, reads
the samples scraped since the last cycle for all of them at once, rebuilds each server's pages
(:mod:`advisor.sources.prometheus`) and feeds them to that server's own
:class:`~advisor.runner.Advisor` (a window per instance; the same signals and rules as a
sidecar), then evaluates every server and publishes the states together.

Query load per cycle does not grow with the number of servers: one ``/api/v1/series`` (who is
there), one ``/api/v1/label/__name__/values`` (which families), one raw read per series family
for all instances, one of ``up``, one instant query for sidecars' knob series, and
``/api/v1/metadata`` every ``METADATA_EVERY`` cycles. The samples read per cycle grow with the
servers (only those since the last cycle; a whole window when a server is first seen).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from dataclasses import replace as dc_replace
from typing import Any

import structlog

from advisor.core.config import Config, parse_listen
from advisor.core.model import ParseWarning, Provenanced, Snapshot
from advisor.derive import timeseries
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import Rule
from advisor.drive import scaling
from advisor.drive.history import AdviceHistory, experiment_record
from advisor.drive.inputs import partial_answer
from advisor.drive.runner import Advisor, export_state
from advisor.outputs.fleet import FleetPages, make_server
from advisor.outputs.state import Deployment, ExportState, FleetState, History, Member, Server
from advisor.predict import replicas as rp
from advisor.sources import prometheus as prom
from advisor.sources.metrics import MetricsError

log = structlog.get_logger("vllm-advisor")

METADATA_EVERY = 20
# An instance no longer discovered and without samples this long is forgotten.
FORGET_AFTER_S = 900.0
# Servers one fleet daemon follows (one core holds ~200 at a 5 s cycle, docs/fleet.md); beyond,
# the first by instance name are followed and the rest counted (vllm_advisor_fleet_instances_dropped).
MAX_INSTANCES = 1000
# A cycle's requests share one deadline: long enough for a large fleet's first cycle, short
# enough that a stalled Prometheus ends the cycle (the state says so earlier: see state()).
MIN_CYCLE_BUDGET_S = 30.0
PAGE_WAIT_S = 2.0  # a server's page waits this long for the cycle to let go of the windows
HISTORY_ROWS = 50  # experiments a server's /history shows


def family_groups(metric_names: Sequence[str]) -> list[list[str]]:
    """Group metric names into families (a histogram's ``_bucket/_sum/_count``, a counter with its
    ``_total``): one raw read per group. ``_created`` series are never read."""
    groups: dict[str, list[str]] = defaultdict(list)
    for n in sorted(set(metric_names)):
        if n.endswith("_created"):
            continue
        base = n
        for suffix in ("_bucket", "_sum", "_count", "_total"):
            if n.endswith(suffix):
                base = n[: -len(suffix)]
                break
        groups[base].append(n)
    return [groups[k] for k in sorted(groups)]


def with_bad_sidecar(d: Diagnosis, bad: Sequence[ParseWarning]) -> Diagnosis:
    """The diagnosis of a server whose sidecar's knob or fact series are no reading: said in
    its reason for as long as Prometheus holds them (they are bad samples of its window too)."""
    first = bad[0]
    more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
    return dc_replace(d, reason=f"{d.reason}; {first.family}: {first.reason}{more}")


class Fleet:
    """Advisors for every vLLM server behind ``selector`` in a Prometheus. ``cycle()`` is the
    whole work of one period; threads and the HTTP server live in :func:`run`."""

    def __init__(
        self,
        cfg: Config,
        rules: Sequence[Rule],
        client: prom.Client,
        selector: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.rules = tuple(rules)
        self.client = client
        self.matchers = prom.selector_matchers(selector)
        self.clock = clock
        self.advisors: dict[str, Advisor] = {}
        self.servers: dict[str, Server] = {}
        self.last_t: dict[str, float] = {}
        self.metadata: dict[str, tuple[str, str]] = {}
        self.cycles = 0
        self.max_instances = MAX_INSTANCES
        self._lock = threading.Lock()
        self._state = FleetState()
        self._range_s = 0.0
        self._samples = 0
        self.holds: dict[tuple[str, ...], rp.Hold] = {}  # per deployment (scaling.deployment_key)
        self.sizers: dict[str, scaling.Sizer] = {}  # per instance
        self._deployments: tuple[Deployment, ...] = ()
        self._dropped = 0
        self._last_ok: float | None = None  # clock time of the last cycle that read Prometheus
        self._last_error: str | None = None  # the kind of failure logged (once per episode)
        self._partial_said = False
        self.advice: dict[str, AdviceHistory] = {}  # per instance, in memory (no state dir)

    # ---------------------------------------------------------------- the pages
    def charts(self, instance: str) -> timeseries.Charts | None:
        """One server's window as charts; None when it is not followed, or when the cycle (which
        holds every window while it reads Prometheus) does not let go within PAGE_WAIT_S."""
        if not self._lock.acquire(timeout=PAGE_WAIT_S):
            return None
        try:
            adv = self.advisors.get(instance)
            return None if adv is None else timeseries.charts(adv.window, adv.engine, self.cfg.targets)
        finally:
            self._lock.release()

    def history(self, instance: str) -> History | None:
        """One server's experiments and advice, as this fleet daemon saw them (in memory)."""
        if not self._lock.acquire(timeout=PAGE_WAIT_S):
            return History(error="The fleet's cycle is running: refresh in a moment.")
        try:
            adv = self.advisors.get(instance)
            hist = self.advice.get(instance)
            rows: list[dict[str, Any]] = []
            if adv is not None:
                done = adv.finished_experiments[-HISTORY_ROWS:]
                rows = [asdict(experiment_record(x, adv.engine)) for x in reversed(done)]
            return History(
                tuple(rows),
                hist.newest_first() if hist is not None else (),
                "Judged by this fleet daemon since it started, kept in memory (it keeps no ledger).",
                f"Kept in memory by this fleet daemon (the last {hist.limit if hist else 0}), newest first.",
            )
        finally:
            self._lock.release()

    def pages(self) -> FleetPages:
        return FleetPages(self.charts, self.history, self.cfg.interval_s)

    def _observe(self, st: FleetState) -> None:
        """Every server's published diagnosis into its advice history (under the lock)."""
        for m in st.members:
            if m.state.diagnosis is None:
                continue
            hist = self.advice.get(m.server.instance)
            if hist is None:
                hist = self.advice[m.server.instance] = AdviceHistory(
                    merge_gap_s=max(3 * self.cfg.interval_s, 15.0)
                )
            hist.observe(m.state.diagnosis)

    # ---------------------------------------------------------------- state
    def fresh_for_s(self) -> float:
        """A cycle that read Prometheus this recently keeps ``prometheus_up`` and the advice:
        two intervals, or two cycle times where a cycle takes longer than the interval."""
        return 2 * max(self.cfg.interval_s, self._state.cycle_seconds or 0.0)

    def state(self) -> FleetState:
        """The state to export now: a cycle stuck on a stalled Prometheus cannot leave
        ``prometheus_up`` 1 or advice behind for longer than :meth:`fresh_for_s`."""
        st = self._state
        if not st.prometheus_up or self._last_ok is None:
            return st
        age = self.clock() - self._last_ok
        if age <= self.fresh_for_s():
            return st
        return self._unreadable(
            st.at,
            f"no answer from Prometheus for {age:.0f}s (a cycle is still waiting)",
            st.cycle_seconds,
            st.queries_last_cycle,
            from_state=st,
        )

    def cycle_budget_s(self) -> float:
        return max(3 * self.cfg.interval_s, MIN_CYCLE_BUDGET_S)

    # ---------------------------------------------------------------- the cycle
    def _discover(self, now: float) -> dict[str, Server]:
        lookback = max(3 * self.cfg.interval_s, 60.0)
        found = self.client.series(
            [prom.selector(f"__name__=~{prom.quote('|'.join(prom.DISCOVERY_NAMES))}", self.matchers)],
            now - lookback,
            now,
        )
        acc: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        for labels in found:
            inst = labels.get(prom.INSTANCE)
            if not inst:
                continue
            for label, key in (
                (prom.JOB, "job"),
                ("model_name", "models"),
                ("engine", "engines"),
                ("namespace", "namespace"),
                ("service", "service"),
            ):
                if labels.get(label):
                    acc[inst][key].add(labels[label])
        return {
            i: Server(
                i,
                ",".join(sorted(a["job"])),
                tuple(sorted(a["models"])),
                tuple(sorted(a["engines"], key=lambda e: (len(e), e))),
                ",".join(sorted(a["namespace"])),
                ",".join(sorted(a["service"])),
            )
            for i, a in acc.items()
        }

    def _names(self, now: float, range_s: float, matchers: str) -> list[str]:
        read = prom.selector(f"__name__=~{prom.quote(prom.READ_NAME_RE)}", matchers)
        return self.client.label_values("__name__", [read], now - range_s, now)

    def _advisor(self, server: Server, base: Mapping[str, Provenanced]) -> Advisor:
        adv = self.advisors.get(server.instance)
        if adv is None:
            adv = Advisor(self.cfg, self.rules, base=base, clock=self.clock)
            self.advisors[server.instance] = adv
        elif base and dict(base) != adv.base:
            learned = not adv.base
            adv.base = dict(base)  # a changed one is read at the next engine refresh (a restart)
            if learned:  # the sidecar's facts arrived after the server was first seen: use them now
                adv.refresh_engine(self.clock())
        return adv

    def cycle(self) -> FleetState:
        """Discover, read what was scraped since the last cycle, evaluate every server, publish.
        Never raises on what Prometheus answers: a failed cycle withdraws every advice, and a
        partial answer (Prometheus's ``warnings``) makes every server unknown for the cycle
        without consuming its samples."""
        t0 = time.monotonic()
        calls0 = self.client.calls
        now = self.clock()
        try:
            with self._lock, self.client.budget(self.cycle_budget_s()):
                members = self._cycle(now)
            st = FleetState(
                members=tuple(members),
                prometheus_up=True,
                cycle_seconds=time.monotonic() - t0,
                queries_last_cycle=self.client.calls - calls0,
                cycles=self.cycles,
                at=now,
                range_s=self._range_s,
                samples_last_cycle=self._samples,
                deployments=self._deployments,
                instances_dropped=self._dropped,
            )
            self._last_ok = now
            if self._last_error is not None:
                log.info("prometheus read again", prometheus=self.client.shown_url)
                self._last_error = None
        except prom.PrometheusError as e:
            if e.kind != self._last_error:  # one line per failure episode (or kind), not per cycle
                log.warning("prometheus cycle failed", error=str(e))
                self._last_error = e.kind
            st = self._unreadable(now, str(e), time.monotonic() - t0, self.client.calls - calls0)
        self.cycles += 1
        with self._lock:
            self._observe(st)
        self._state = st
        return st

    def _cycle(self, now: float) -> list[Member]:
        warned0 = len(self.client.warnings)
        if self.cycles % METADATA_EVERY == 0 or not self.metadata:
            self.metadata = self.client.metadata()
        found = self._discover(now)
        if len(found) > self.max_instances:
            kept = sorted(found)[: self.max_instances]
            if self._dropped != len(found) - len(kept):
                log.warning(
                    "more vLLM servers than one fleet daemon follows",
                    found=len(found),
                    followed=len(kept),
                    hint="narrow --selector, or run one fleet daemon per selector",
                )
            self._dropped = len(found) - len(kept)
            found = {i: found[i] for i in kept}
            only = f"{prom.INSTANCE}=~{prom.quote('|'.join(_re_escape(i) for i in kept))}"
            matchers = ",".join(m for m in (self.matchers, only) if m)
        else:
            self._dropped = 0
            matchers = self.matchers
        for inst, server in found.items():
            self.servers[inst] = server
        window = max(self.cfg.window_s, self.cfg.min_window_s)
        known = [self.last_t[i] for i in found if i in self.last_t]
        new = [i for i in found if i not in self.last_t]
        since = min(known) if known and not new else now - window
        range_s = min(
            max(now - since, self.cfg.interval_s) + self.cfg.interval_s, max(window, self.cfg.retention_s)
        )
        raw: list[prom.Series] = []
        for group in family_groups(self._names(now, range_s, matchers)):
            names = "|".join(group)
            raw += self.client.raw(prom.selector(f"__name__=~{prom.quote(names)}", matchers), range_s, now)
        self._range_s, self._samples = range_s, sum(len(v) for _, v in raw)
        up_raw = self.client.raw(prom.selector('__name__="up"', matchers), range_s, now)
        sidecar = self.client.instant(prom.SIDECAR_SELECTOR, now)
        warnings = self.client.warnings[warned0:]
        if warnings:  # a partial answer: nothing of it is fed, every server is unknown this cycle
            del self.client.warnings[warned0:]
            return self._partial(found, warnings, now)
        self._partial_said = False
        pages = prom.snapshots(raw, self.metadata, after=self.last_t)
        up = prom.down_times(up_raw)
        members = []
        for inst in sorted(set(self.servers) | set(pages)):
            server = self.servers.get(inst) or Server(inst)
            snaps: list[Snapshot] = pages.get(inst, [])
            last = self.last_t.get(inst)
            down = [t for t in up.get(inst, []) if last is None or t > last]
            gone = not snaps and not down and inst not in found
            if gone and (last is None or now - last > FORGET_AFTER_S):
                self._forget(inst)
                continue
            engine, bad = prom.sidecar_readings(sidecar, inst)
            adv = self._advisor(server, engine)
            self._feed(adv, snaps, down)
            if bad:  # the sidecar's knob or fact series that are no reading: named, never a value
                adv.note_bad_samples(bad, now)
            if snaps or down:
                self.last_t[inst] = max([s.t for s in snaps] + down)
            d = self._diagnose(adv, now)
            if bad:
                d = with_bad_sidecar(d, bad)
            members.append(Member(server, self._export(adv, d)))
        self._deployments = self._size(members, now)
        return members

    def _size(self, members: Sequence[Member], now: float) -> tuple[Deployment, ...]:
        """One desired replica count per deployment: each of its servers' model asked as one of
        the servers up now, the most any needs, through the deployment's hold."""
        groups: dict[tuple[str, str, str, str], list[Member]] = defaultdict(list)
        for m in members:
            groups[scaling.deployment_key(m.server)].append(m)
        out = []
        for key, ms in sorted(groups.items()):
            up = [m for m in ms if m.state.up]
            hold = self.holds.get(key)
            if hold is None:
                hold = self.holds[key] = rp.Hold(self.cfg.scale_in_hold_s)
            sizings = [
                self.sizers.setdefault(m.server.instance, scaling.Sizer())(
                    self.advisors[m.server.instance], m.state.diagnosis, len(up), upto=hold.upto
                )
                for m in up
                if m.server.instance in self.advisors
            ]
            known = [x for x in sizings if x is not None]
            # a deployment is sized only when every server up has a sizing: one still warming up
            # may be the one that needs the most
            combined = rp.combine(known) if known and len(known) == len(sizings) else None
            model, namespace, job, service = key
            out.append(
                Deployment(
                    model,
                    namespace,
                    job,
                    service,
                    tuple(m.server.instance for m in ms),
                    len(up),
                    hold.update(now, combined),
                )
            )
        for gone in set(self.holds) - set(groups):
            del self.holds[gone]
        return tuple(out)

    def _partial(self, found: Mapping[str, Server], warnings: Sequence[str], now: float) -> list[Member]:
        """Every followed server, its advice withdrawn: Prometheus answered with warnings."""
        if not self._partial_said:  # once per episode of partial answers
            self._partial_said = True
            log.warning(
                "prometheus answered partially; its answers are not used", warnings=list(warnings)[:3]
            )
        members = []
        for inst in sorted(set(found) | set(self.advisors)):
            server = self.servers.get(inst) or Server(inst)
            adv = self._advisor(server, {})
            d = adv.diagnose(now)
            members.append(Member(server, self._export(adv, partial_answer(d, warnings))))
        return members

    @staticmethod
    def _feed(adv: Advisor, snaps: Sequence[Snapshot], down: Sequence[float]) -> None:
        items: list[tuple[float, int, Snapshot | None]] = [(s.t, 1, s) for s in snaps]
        items += [(t, 0, None) for t in down]
        for t, _, snap in sorted(items, key=lambda i: (i[0], i[1])):
            if snap is None:
                adv.on_scrape_error(MetricsError("refused", "Prometheus could not scrape it (up == 0)"), t)
            else:
                adv.on_snapshot(snap)

    def _diagnose(self, adv: Advisor, now: float) -> Diagnosis:
        try:
            d = adv.diagnose(now)
        except Exception as e:  # a bug must not stop the other servers' advice
            log.exception("diagnosis failed")
            return Diagnosis(
                "insufficient-data", f"internal error: {type(e).__name__}: {e}", None, (), {}, {}, now, {}
            )
        last = adv.stats.last_scrape_t
        if d.status == "advice" and (
            last is None or now - last > max(3 * self.cfg.interval_s, self.cfg.stale_after_s)
        ):
            # Prometheus has stopped getting pages for it: never show stale advice as current
            return Diagnosis(
                "insufficient-data",
                "no recent scrape of this server in Prometheus",
                None,
                d.findings,
                d.engine,
                d.context,
                now,
                {},
            )
        return d

    def _export(self, adv: Advisor, d: Diagnosis) -> ExportState:
        return export_state(adv, self.rules, d)

    def _forget(self, inst: str) -> None:
        self.advisors.pop(inst, None)
        self.advice.pop(inst, None)
        self.sizers.pop(inst, None)
        self.servers.pop(inst, None)
        self.last_t.pop(inst, None)

    def _unreadable(
        self,
        now: float,
        err: str,
        seconds: float | None,
        queries: int,
        from_state: FleetState | None = None,
    ) -> FleetState:
        base = from_state or self._state
        members = []
        for m in base.members:
            d = m.state.diagnosis
            withdrawn = Diagnosis(
                "insufficient-data",
                f"Prometheus cannot be read: {err}",
                None,
                d.findings if d else (),
                d.engine if d else {},
                d.context if d else {},
                now,
                {},
            )
            members.append(Member(m.server, ExportState(withdrawn, False, self.rules, dict(m.state.scrapes))))
        # Prometheus cannot be read: no desired count is current (the autoscaler's fallback holds)
        return FleetState(
            tuple(members), False, err, seconds, queries, self.cycles, now, instances_dropped=self._dropped
        )


def _re_escape(text: str) -> str:
    """An instance name as an RE2 literal (Prometheus's regex syntax)."""
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", text)


@dataclass
class Runner:
    """Threads around a :class:`Fleet`: the cycle on a timer, the HTTP server."""

    fleet: Fleet
    listen: str
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    server: Any = None

    def start(self) -> tuple[str, int]:

        host, port = parse_listen(self.listen)
        self.server = make_server(host, port, self.fleet.state, self.fleet.pages())
        th = threading.Thread(target=self.server.serve_forever, daemon=True, name="http")
        th.start()
        loop = threading.Thread(target=self._loop, daemon=True, name="fleet-cycle")
        loop.start()
        self._threads += [th, loop]
        addr = self.server.server_address
        log.info("fleet started", prometheus=self.fleet.client.shown_url, listen=f"{addr[0]}:{addr[1]}")
        return str(addr[0]), int(addr[1])

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.fleet.cycle()
            except Exception:  # never let the loop die
                log.exception("fleet cycle failed")
            self._stop.wait(max(0.0, self.fleet.cfg.interval_s - (time.monotonic() - t0)))

    def stop(self) -> None:
        """Within a second or two whatever Prometheus does: requests in flight are aborted."""
        self._stop.set()
        self.fleet.client.abort()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        deadline = time.monotonic() + 2.0
        for th in self._threads:
            th.join(timeout=max(0.0, deadline - time.monotonic()))

    def install_signals(self) -> None:
        """SIGINT/SIGTERM stop the fleet and abort what Prometheus is being asked."""

        def handler(signum: int, frame: object) -> None:
            self._stop.set()
            self.fleet.client.abort()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, handler)
            signal.signal(signal.SIGTERM, handler)

    def wait(self, seconds: float | None = None) -> None:
        self.install_signals()
        self._stop.wait(seconds)


def run(
    cfg: Config, rules: Sequence[Rule], prometheus_url: str, selector: str, run_seconds: float | None = None
) -> int:
    """``vllm-advisor run --prometheus URL``: until SIGINT/SIGTERM (or ``run_seconds``)."""
    fleet = Fleet(
        cfg, rules, prom.Client(prometheus_url, timeout_s=max(cfg.scrape_timeout_s, 10.0)), selector
    )
    runner = Runner(fleet, cfg.listen)
    runner.install_signals()  # before anything asks Prometheus: SIGTERM always works
    try:
        runner.start()
    except OSError as e:
        log.error("cannot listen", listen=cfg.listen, error=str(e))
        return 1
    try:
        runner.wait(run_seconds)
    finally:
        runner.stop()
    return 0
