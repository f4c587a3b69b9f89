"""The only place with threads, timers and sleeps.

``run``: apscheduler scrapes vLLM every ``interval`` and evaluates after each scrape;
a thread follows the log; the exporter serves the latest immutable state; SIGINT and
SIGTERM shut everything down cleanly. ``observe`` watches a URL for ``explain --url``;
``replay`` drives a recorded session in real time (or faster) for demos and tests.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import requests
import structlog
from apscheduler.schedulers.background import BackgroundScheduler

from advisor.advise import Diagnosis
from advisor.config import Config, parse_listen
from advisor.log import configure_logging
from advisor.outputs.exporter import ExportState, make_server
from advisor.ruleset import Rule
from advisor.runner import Advisor
from advisor.sources import engine as engine_src
from advisor.sources import logs as log_src
from advisor.sources import metrics as metrics_src

log = structlog.get_logger("vllm-advisor")


def metrics_url(url: str) -> str:
    u = url.rstrip("/")
    return u if u.endswith("/metrics") else u + "/metrics"


class Daemon:
    """Wires the sources, the advisor state and the exporter together."""

    def __init__(
        self,
        cfg: Config,
        rules: Sequence[Rule],
        advisor: Advisor | None = None,
        clock: Callable[[], float] = time.time,
        persist: bool = True,
    ) -> None:
        self.cfg = cfg
        self.persist = persist
        self.rules = tuple(rules)
        self.clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if advisor is None:
            port = cfg.vllm_port or urlparse(cfg.vllm_url).port
            host = {**engine_src.host_facts(), **engine_src.from_api(cfg.vllm_url)}

            def argv() -> Sequence[str] | None:
                try:
                    return engine_src.find_vllm_process(port)
                except Exception:  # psutil access issues must never stop the daemon
                    return None

            advisor = Advisor(
                cfg, rules, base=host, config_path=cfg.engine_config, argv_provider=argv, clock=clock
            )
        self.advisor = advisor
        self._state = self._build_state()
        self.http = requests.Session()
        self.scheduler: BackgroundScheduler | None = None
        self.follower: log_src.LogFollower | None = None
        self.server: Any = None
        self._threads: list[threading.Thread] = []
        self.last_logged_status: str | None = None

    # ---------------------------------------------------------------- state
    def state(self) -> ExportState:
        st = self._state
        # never show stale advice as current: if the cycle stopped, withdraw it here too
        d = st.diagnosis
        if (
            d is not None
            and d.status == "advice"
            and self.clock() - d.at > max(3 * self.cfg.interval_s, self.cfg.stale_after_s)
        ):
            stale = Diagnosis(
                "insufficient-data",
                "the advisor's last evaluation is stale",
                None,
                d.findings,
                d.engine,
                d.context,
                d.at,
                {},
            )
            return ExportState(
                stale,
                False,
                st.rules,
                st.scrapes,
                st.log_lines,
                st.last_scrape_t,
                st.last_scrape_duration_s,
                st.knob_changes,
                st.experiment,
            )
        return st

    def _record_experiments(self) -> None:
        """Write judged experiments to the ledger (SQLite under the state dir)."""
        done, self.advisor.finished_experiments = self.advisor.finished_experiments, []
        if not done:
            return
        from advisor.ledger import ExperimentRecord, Ledger, LedgerError

        path = self.cfg.ledger_path or str(Path(self.cfg.state_dir) / "ledger.sqlite")
        eng = self.advisor.engine
        for exp in done:
            j = exp.to_json()
            comp = j.get("comparison") or {}
            rec = ExperimentRecord(
                started_at=exp.after_start,
                ended_at=exp.ended_at,
                verdict=exp.verdict or "inconclusive",
                source="daemon",
                knob=j["knob"],
                flag=j["flag"],
                old_value=j["old"],
                new_value=j["new"],
                model=eng.get("served_model_name") or eng.get("model"),
                vllm_version=eng.get("vllm_version"),
                gpus=str(eng.get("gpu_count") or eng.get("device") or ""),
                load_profile=exp.load,
                buckets=list(comp.get("buckets", [])),
                reasons=list(exp.reasons),
                prediction=exp.prediction,
            )
            try:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                rid = Ledger(path).add(rec)
                log.info(
                    "experiment judged",
                    knob=j["knob"],
                    old=j["old"],
                    new=j["new"],
                    verdict=exp.verdict,
                    ledger=path,
                    id=rid,
                    reasons=list(exp.reasons),
                )
            except (LedgerError, OSError) as e:
                log.error("cannot write the ledger", ledger=path, error=str(e))

    def _build_state(self, diagnosis: Diagnosis | None = None) -> ExportState:
        a = self.advisor
        return ExportState(
            diagnosis=diagnosis,
            up=a.up,
            rules=self.rules,
            scrapes=dict(a.stats.scrapes),
            log_lines=dict(a.stats.log_lines),
            last_scrape_t=a.stats.last_scrape_t,
            last_scrape_duration_s=a.stats.last_scrape_duration_s,
            knob_changes=len(a.changes),
            experiment=diagnosis.experiment if diagnosis is not None else None,
        )

    # ---------------------------------------------------------------- the cycle
    def cycle(self) -> Diagnosis:
        """Scrape once, evaluate, publish. Never raises on input."""
        t0 = time.monotonic()
        try:
            page = metrics_src.fetch(metrics_url(self.cfg.vllm_url), self.cfg.scrape_timeout_s, self.http)
            text, t, dur = page.text, self.clock(), page.duration_s
            err: Exception | None = None
        except metrics_src.MetricsError as e:
            text, t, dur, err = "", self.clock(), time.monotonic() - t0, e
        with self._lock:
            if err is None:
                ok = self.advisor.on_page(text, t, dur)
                if not ok:
                    log.warning("bad page", error=self.advisor.stats.last_error)
            else:
                self.advisor.on_scrape_error(err, t)
                log.warning("scrape failed", error=str(err))
            try:
                d = self.advisor.diagnose()
            except Exception as e:  # a bug must not kill the daemon: report it and withdraw advice
                log.exception("diagnosis failed")
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
            self._state = self._build_state(d)
            if self.persist:
                self._record_experiments()
        self._log_status(d)
        if self.persist:
            self._persist(d)
        return d

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
        try:
            path = Path(self.cfg.state_dir)
            path.mkdir(parents=True, exist_ok=True)
            tmp = path / "diagnosis.json.tmp"
            tmp.write_text(json.dumps(d.to_json(), default=str))
            os.replace(tmp, path / "diagnosis.json")
        except OSError as e:
            log.warning("cannot write state", error=str(e), state_dir=self.cfg.state_dir)

    # ---------------------------------------------------------------- logs
    def _follow_logs(self, follower: log_src.LogFollower) -> None:
        try:
            for line in follower.lines():
                with self._lock:
                    self.advisor.on_log_line(line)
        except log_src.LogSourceError as e:
            log.error("log source failed", error=str(e))
        except Exception:
            log.exception("log follower crashed; logs are no longer read")
        if isinstance(follower, log_src.CommandFollower) and not self._stop.is_set():
            log.warning("log command ended", detail=follower.describe_exit())

    def _start_logs(self) -> None:
        if self.cfg.log_file:
            self.follower = log_src.follow_file(self.cfg.log_file, from_start=True)
        elif self.cfg.log_cmd:
            self.follower = log_src.follow_command(self.cfg.log_cmd)
        if self.follower is not None:
            th = threading.Thread(
                target=self._follow_logs, args=(self.follower,), name="log-follower", daemon=True
            )
            th.start()
            self._threads.append(th)

    # ---------------------------------------------------------------- lifecycle
    def serve(self) -> tuple[str, int]:
        host, port = parse_listen(self.cfg.listen)
        self.server = make_server(host, port, self.state)
        th = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)
        th.start()
        self._threads.append(th)
        addr = self.server.server_address
        return str(addr[0]), int(addr[1])

    def start(self) -> tuple[str, int]:
        addr = self.serve()
        self._start_logs()
        self.scheduler = BackgroundScheduler(daemon=True)
        self.scheduler.add_job(
            self.cycle,
            "interval",
            seconds=self.cfg.interval_s,
            max_instances=1,
            coalesce=True,
            next_run_time=_now_dt(),
            id="scrape",
        )
        self.scheduler.start()
        log.info(
            "started",
            vllm_url=self.cfg.vllm_url,
            listen=f"{addr[0]}:{addr[1]}",
            interval_s=self.cfg.interval_s,
            log_file=self.cfg.log_file,
            log_cmd=bool(self.cfg.log_cmd),
        )
        return addr

    def stop(self) -> None:
        self._stop.set()
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=True)
        if self.follower is not None:
            self.follower.close()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        for th in self._threads:
            th.join(timeout=5)
        log.info("stopped")

    def wait(self, seconds: float | None = None) -> None:
        """Block until SIGINT/SIGTERM (or ``seconds``)."""
        _install_signals(self._stop)
        self._stop.wait(seconds)


def _now_dt() -> Any:
    import datetime as dt

    return dt.datetime.now(dt.UTC)


def _install_signals(stop: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def run(cfg: Config, rules: Sequence[Rule], run_seconds: float | None = None) -> int:
    configure_logging()
    d = Daemon(cfg, rules)
    try:
        d.start()
    except OSError as e:
        log.error("cannot listen", listen=cfg.listen, error=str(e))
        return 1
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
    the final state until stopped. Advice withdrawal by staleness is measured on the
    replayed clock, so the final state stays what the session ended with."""
    from advisor.session import Session, SessionError

    configure_logging()
    try:
        s = Session.load(session_dir)
    except SessionError as e:
        log.error("cannot load session", error=str(e))
        return 1
    from advisor.inputs import advisor_for_session

    adv, clock = advisor_for_session(s, cfg, rules)
    daemon = Daemon(cfg, rules, advisor=adv, clock=clock)
    try:
        host, port = daemon.serve()
    except OSError as e:
        log.error("cannot listen", listen=cfg.listen, error=str(e))
        return 1
    log.info("replaying", session=session_dir, speed=speed, listen=f"{host}:{port}")
    _install_signals(daemon._stop)
    try:

        def pause(x: float) -> None:
            daemon._stop.wait(x)

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
        log.info("replay finished; holding the final state")
        daemon._stop.wait(run_seconds)
    finally:
        daemon.stop()
    return 0


def serve_static(adv: Advisor, d: Diagnosis, cfg: Config, seconds: float | None) -> None:
    """Serve one fixed diagnosis (the demo) until Ctrl-C or ``seconds``."""
    daemon = Daemon(cfg, adv.evaluator.rules, advisor=adv, clock=lambda: d.at)
    daemon._state = daemon._build_state(d)
    try:
        host, port = daemon.serve()
    except OSError as e:
        print(f"cannot serve the exporter on {cfg.listen}: {e}", file=sys.stderr)
        return
    print(
        f"\nExporter: http://{host}:{port}/metrics  ·  page: http://{host}:{port}/  ·  "
        f"JSON: http://{host}:{port}/api/v1/diagnosis  (Ctrl-C to stop)",
        flush=True,
    )
    _install_signals(daemon._stop)
    try:
        daemon._stop.wait(seconds)
    finally:
        daemon.stop()


# ------------------------------------------------------------------ explain helpers
class DaemonError(Exception):
    pass


def fetch_diagnosis(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    u = url.rstrip("/") + "/api/v1/diagnosis"
    try:
        r = requests.get(u, timeout=timeout_s)
        r.raise_for_status()
        data = r.json()
    except (requests.RequestException, ValueError) as e:
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
) -> Diagnosis:
    """Watch a live server for ``window_s`` (``explain --url``) and diagnose it."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    cfg = cfg.with_overrides(
        vllm_url=url,
        interval_s=interval_s,
        engine_config=engine_config,
        window_s=max(window_s, cfg.min_window_s),
    )
    daemon = Daemon(cfg, rules, persist=False)
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
            if i == 0 and not daemon.advisor.up:
                break  # down: say so now rather than after the whole window
            if i < n - 1:
                sleep(interval_s)
    assert d is not None
    return d
