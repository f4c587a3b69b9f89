"""The fleet daemon (advisor/fleet.py, advisor/outputs/fleet.py): every vLLM server a Prometheus
scrapes, advised from one place.

The integration test runs the real things: Debian's Prometheus and Alertmanager, the fleet
daemon in this process, the generated alert rules and Alertmanager routing. The vLLM servers
are stand-ins (tests/fleet_standin.py) replaying /metrics pages recorded from real vLLM CPU
servers (a KV-bound preemption, a preemption where max_num_seqs binds, a healthy server): three
servers with given problems at once cannot be run here. The sidecar beside the second server is
a stand-in too: it serves what the real sidecar exporter exports for that recorded session.
"""

from __future__ import annotations

import http.server
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from advisor.core.config import Config
from advisor.core.model import Provenanced
from advisor.diagnose.advise import Diagnosis, Recommendation
from advisor.diagnose.ruleset import load_rules
from advisor.drive import generate as gen
from advisor.drive.fleet import Fleet, Runner, family_groups
from advisor.drive.inputs import from_session
from advisor.outputs import alert_config, exporter
from advisor.outputs import fleet as fleet_out
from advisor.outputs.deploy import WEBHOOK_BASE
from advisor.outputs.state import ExportState, FleetState, Member, Server
from advisor.sources import metrics
from advisor.sources import prometheus as prom
from tests import browser, fleet_standin, promstack
from tests.hang import HANG_S
from tests.http_standin import serving
from tests.paths import FIXTURES, REPO
from tests.promstack import free_port, prometheus, query, wait_until

SESSIONS = REPO / "tests" / "fixtures" / "sessions"


# ---------------------------------------------------------------------- units
def test_family_groups_put_a_histograms_parts_together() -> None:
    names = [
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_sum",
        "vllm:e2e_request_latency_seconds_created",
        "vllm:prompt_tokens_total",
        "vllm:num_requests_running",
    ]
    assert family_groups(names) == [
        [
            "vllm:e2e_request_latency_seconds_bucket",
            "vllm:e2e_request_latency_seconds_count",
            "vllm:e2e_request_latency_seconds_sum",
        ],
        ["vllm:num_requests_running"],
        ["vllm:prompt_tokens_total"],
    ]


def _diag(status: str, severity: str | None = None, rule: str = "r") -> Diagnosis:
    rec = None
    if severity is not None:
        rec = Recommendation(
            rule=rule,
            severity=severity,
            summary="s",
            knob="max_num_seqs",
            flag="--max-num-seqs",
            direction="decrease",
            current=10,
            proposed=8,
            change="--max-num-seqs 10 -> 8",
            current_source="cmdline",
            evidence=(),
            what="",
            why="",
            expect="",
            verify=(),
            rollback="",
            references=(),
        )
    return Diagnosis(status, "why", rec, (), {}, {"model": ""}, 0.0, {})


def _member(instance: str, d: Diagnosis | None, models: tuple[str, ...] = ("m",)) -> Member:
    return Member(Server(instance, "vllm", models), ExportState(d, True, tuple(load_rules())))


def test_the_fleet_is_listed_worst_first_and_exported_per_instance() -> None:
    st = FleetState(
        members=(
            _member("ok:1", _diag("healthy")),
            _member("info:1", _diag("advice", "info")),
            _member("down:1", _diag("insufficient-data")),
            _member("warn:1", _diag("advice", "warning", rule="kv-preemption-seqs-bind")),
        ),
        prometheus_up=True,
    )
    assert [m.server.instance for m in st.worst_first()] == ["warn:1", "info:1", "down:1", "ok:1"]
    body = fleet_out.fleet_json(st)
    assert body["status"] == "advice" and body["instances"][0]["instance"] == "warn:1"
    page = fleet_out.landing_page(st)
    assert page.index("warn:1") < page.index("info:1") < page.index("down:1") < page.index("ok:1")
    text = generate_latest(fleet_out.make_registry(lambda: st)).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    recs = [s for s in fams["vllm_advisor_recommendation_info"].samples if s.value == 1]
    assert [(s.labels["instance"], s.labels["rule"], s.labels["model_name"]) for s in recs] == [
        ("warn:1", "kv-preemption-seqs-bind", "m"),
        ("info:1", "r", "m"),
    ]
    status = {
        s.labels["instance"]: s.labels["status"] for s in fams["vllm_advisor_status"].samples if s.value == 1
    }
    assert status == {
        "ok:1": "healthy",
        "info:1": "advice",
        "down:1": "insufficient-data",
        "warn:1": "advice",
    }
    assert all(s.labels["vllm_advisor"] == "fleet" for s in fams["vllm_advisor_up"].samples)
    assert fams["vllm_advisor_fleet_instances"].samples[0].value == 4


def test_a_sidecar_seen_after_its_server_gives_its_knobs_at_once() -> None:
    """Prometheus may scrape a server before its sidecar: the knobs the sidecar read (from the
    server's command line) replace the defaults on the cycle they arrive, not at a restart
    (a CI run of the stack test below saw max_num_seqs stay at the default 256)."""

    fleet = Fleet(Config(), load_rules(), prom.Client("http://127.0.0.1:9"), "")
    server = Server("b.fleet:8000")
    adv = fleet._advisor(server, {})
    page = (FIXTURES / "pages" / "cpu-0.32-baseline-before.prom").read_text()
    adv.on_snapshot(metrics.parse_page(page, 100.0))
    assert adv.engine.source("max_num_seqs") == "default"
    read = {"max_num_seqs": Provenanced(10, "cmdline", "vllm_advisor_engine_knob via Prometheus")}
    assert fleet._advisor(server, read) is adv
    assert (adv.engine.get("max_num_seqs"), adv.engine.source("max_num_seqs")) == (10, "cmdline")
    assert adv.changes == []  # learned, not a change of the server's


# ---------------------------------------------------------------------- the real stack
def _sidecar_page(session: Path) -> str:
    """What a real sidecar exports after living through ``session`` (its exporter's text)."""
    adv, d = from_session(session, Config(), load_rules())
    st = ExportState(d, adv.up, tuple(load_rules()), dict(adv.stats.scrapes))
    return generate_latest(exporter.make_registry(lambda: st)).decode()


@pytest.fixture
def webhook() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    got: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            n = int(self.headers.get("Content-Length", "0"))
            got.append(json.loads(self.rfile.read(n)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a: Any) -> None:
            pass

    with serving(Handler) as url:
        yield int(url.rsplit(":", 1)[1]), got


@pytest.fixture
def alertmanager(tmp_path: Path, webhook: tuple[int, list[dict[str, Any]]]) -> Iterator[str]:

    cfg = yaml.safe_load((REPO / "deploy/alertmanager/alertmanager.yml").read_text())
    cfg["route"].update({"group_wait": "0s", "group_interval": "1s"})
    for r in cfg["receivers"]:
        for w in r["webhook_configs"]:
            w["url"] = w["url"].replace(WEBHOOK_BASE, f"http://127.0.0.1:{webhook[0]}")
    with promstack.alertmanager(tmp_path, cfg) as (hostport, _):
        yield hostport


def _rules_for_test(tmp: Path) -> Path:
    text = (
        (REPO / gen.RULES_FILE).read_text().replace(f"    for: {alert_config.ALERT_FOR}\n", "    for: 1s\n")
    )
    path = tmp / "rules.yaml"
    path.write_text(text.replace("  interval: 30s\n", "  interval: 1s\n"))
    return path


def _statuses(base: str) -> dict[str, str]:
    """Each server's status as the fleet's API says it now, as its page writes it."""
    body = requests.get(base + "/api/v1/diagnosis", timeout=HANG_S).json()
    return {i["instance"]: i["status"].upper().replace("-", " ") for i in body["instances"]}


def _each_server_has_its_own_page(base: str, tmp: Path) -> None:
    """The fleet's page in Debian's chromium (tests/browser.py): every server side by side with
    the status the fleet's API gives it, each linking to its own page (the diagnosis beside the
    charts of its window) and history.

    The replays go on meanwhile and a status can change with a cycle (b's rule, as its queue comes
    and goes), so the page is compared with the API read just before and just after it, and read
    again where a cycle changed a status in between. A cycle still waiting on Prometheus past
    two intervals makes every server "insufficient data" until it answers (the daemon shows no
    stale advice as current): on a loaded machine (make test-under-load) a page read then is
    read again, as the steady loads' statuses are what is checked."""
    instances = ("a.fleet:8000", "b.fleet:8000", "c.fleet:8000")
    with browser.chromium() as ctx:
        for _ in range(10):
            before = _statuses(base)
            fleet_page = browser.open_page(ctx, base + "/")
            rows = fleet_page.page.inner_text("table#servers")
            after = _statuses(base)
            # the page itself drawn while a cycle waited (the API read on either side was not)
            if (
                before == after
                and "INSUFFICIENT DATA" not in after.values()
                and "INSUFFICIENT DATA" not in rows
            ):
                break
            time.sleep(1.0)
        else:
            raise AssertionError(
                f"the fleet's statuses changed or Prometheus was unread in every one of 10 reads: {before} -> {after}"
                f"\n{rows}"
            )
        browser.screenshot(fleet_page.page, "fleet.png")
        assert fleet_page.problems() == [] and fleet_page.elsewhere(base) == []
        shown = {}
        for line in rows.splitlines():
            cells = line.split("\t")
            for inst in instances:
                if cells[0].startswith(inst):
                    shown[inst] = cells[2]
        assert shown == {i: after[i] for i in instances}, (rows, after)
        assert shown["a.fleet:8000"] == "ADVICE" and shown["c.fleet:8000"] == "HEALTHY", rows  # steady loads
        b_advised = after["b.fleet:8000"] == "ADVICE"
        fleet_page.page.click("text=b.fleet:8000")
        fleet_page.page.wait_for_load_state("load")
        one = fleet_page.page
        assert one.url == base + "/server?instance=b.fleet%3A8000"
        if b_advised and _statuses(base)["b.fleet:8000"] == "ADVICE":
            assert "Change: --" in (browser.read_when(one, lambda p: p.inner_text("#change"), 10.0) or "")
        # a page asked while the cycle holds the windows past the page's wait (a loaded machine)
        # comes without charts and says so (#charts-late); the page refreshes itself every
        # interval, so the charts are waited for on the pages that come, never reloaded by hand
        # (a reload raced that refresh: ERR_ABORTED)

        def charts(p: Any) -> list[float] | None:
            if len(p.query_selector_all("figure.chart")) != 6:
                return None
            points: list[float] = p.evaluate(
                "[...document.querySelectorAll('figure.chart path.series')].map(p => +p.dataset.points)"
            )
            return points

        points = browser.read_when(one, charts, 30.0)
        assert points and min(points) >= 2, (
            points,
            browser.read_when(one, lambda p: p.inner_text("body"), 5.0),
        )
        assert fleet_page.problems() == [] and fleet_page.elsewhere(base) == []
        history = browser.open_page(ctx, base + "/history?instance=b.fleet%3A8000")
        # the KV advice b was given (asserted on the exporter above) is on its history, from
        # either KV rule: which one binds moves with b's queue as its steady span comes round
        told = history.page.inner_text("table#advice")
        assert "kv-preemption-seqs-bind" in told or "kv-preemption-capacity" in told, told
        missing = requests.get(base + "/server", params={"instance": "x:1"}, timeout=HANG_S)
        assert missing.status_code == 404


@pytest.mark.prometheus
def test_fleet_daemon_advises_every_server_and_two_symptoms_alert(
    tmp_path: Path, alertmanager: str, webhook: tuple[int, list[dict[str, Any]]]
) -> None:
    """Three servers behind ``{job="vllm"}``: A preempts with the batch far below its cap
    (kv-preemption-capacity), B preempts with max_num_seqs binding (known from B's sidecar:
    kv-preemption-seqs-bind), C is healthy. The fleet daemon reads them from Prometheus, exports
    the advisor's series per instance, Prometheus scrapes the fleet daemon (honor_labels) and
    evaluates the generated alert rules: both symptoms alert at Alertmanager at once, each with
    its server's instance; C does not. The fleet's page, in chromium, lists the three and links
    each to its own page."""
    speed = 2.0
    start = time.time()
    replays = {
        # each load goes on as in its middle half once the recording gets there (steady): the
        # recordings' loads drain 48-94 s in, and a loaded machine (a make test beside
        # stress-ng) reached the checks below after that, with b and c idle
        "a": fleet_standin.session_replay(SESSIONS / "cpu-preempt-nobind", speed, start, steady=True),
        "b": fleet_standin.session_replay(SESSIONS / "cpu-preempt-binds", speed, start, steady=True),
        "c": fleet_standin.session_replay(SESSIONS / "cpu-healthy", speed, start, steady=True),
        "b-sidecar": fleet_standin.Replay([_sidecar_page(SESSIONS / "cpu-preempt-binds")], [0.0]),
    }
    cfg = Config(interval_s=1.0, window_s=40.0, listen="127.0.0.1:0", state_dir=str(tmp_path / "state"))
    with fleet_standin.serve(replays) as base:
        vllm_job = fleet_standin.scrape_config("vllm", base, ["a", "b", "c"], lambda n: f"{n}.fleet:8000")
        sidecar_job = fleet_standin.scrape_config(
            "vllm-advisor", base, ["b-sidecar"], lambda n: "b.fleet:19842"
        )
        fleet_port = free_port()
        fleet_job = {
            "job_name": "vllm-advisor-fleet",
            "honor_labels": True,
            "static_configs": [{"targets": [f"127.0.0.1:{fleet_port}"]}],
        }
        with prometheus(
            tmp_path,
            {},
            rule_files=[_rules_for_test(tmp_path)],
            scrape_configs=[vllm_job, sidecar_job, fleet_job],
            alertmanager=alertmanager,
        ) as (prom_url, proc):
            fleet = Fleet(cfg, load_rules(), prom.Client(prom_url), '{job="vllm"}')
            runner = Runner(fleet, f"127.0.0.1:{fleet_port}")
            runner.start()
            try:
                # Both preempting servers alert at once. Which of the two KV rules b's advice comes
                # from depends on where its replay is (the cap binds, then the load drains below
                # it): either is right for b, so either is accepted there.
                def both(pairs: set[tuple[str, str]]) -> bool:
                    return ("VllmAdvisorKvPreemptionCapacity", "a.fleet:8000") in pairs and bool(
                        {
                            ("VllmAdvisorKvPreemptionSeqsBind", "b.fleet:8000"),
                            ("VllmAdvisorKvPreemptionCapacity", "b.fleet:8000"),
                        }
                        & pairs
                    )

                firing = wait_until(
                    "both symptoms firing at once",
                    lambda: both(
                        {
                            (a["metric"]["alertname"], a["metric"]["instance"])
                            for a in query(prom_url, 'ALERTS{alertstate="firing"}')
                        }
                    ),
                    300,  # generous: on a busy 2-core machine the replays, scrapes and rules lag
                    [proc],
                )
                assert firing

                # the fleet daemon's own series, per instance: b's advice comes and goes as its
                # queue does (a KV rule's hold starts over when the other one takes its place), so
                # both are waited for, not read once
                fams: dict[str, Any] = {}

                def both_advised() -> bool:
                    text = requests.get(f"http://127.0.0.1:{fleet_port}/metrics", timeout=HANG_S).text
                    fams.clear()
                    fams.update({f.name: f for f in text_string_to_metric_families(text)})
                    recs = {
                        s.labels["instance"]: s.labels
                        for s in fams["vllm_advisor_recommendation_info"].samples
                        if s.value == 1
                    }
                    ups = {s.labels["instance"]: s.value for s in fams["vllm_advisor_up"].samples}
                    return (
                        set(recs) == {"a.fleet:8000", "b.fleet:8000"}
                        and recs["b.fleet:8000"]["rule"]
                        in ("kv-preemption-seqs-bind", "kv-preemption-capacity")
                        and recs["a.fleet:8000"]["knob"] == "kv_cache_memory_bytes"
                        # every server up at the same read: a scrape of a stand-in that Prometheus
                        # timed out on a busy machine is that server down for a moment (a make
                        # test run read c's up 0 once), and is read again
                        and ups == {"a.fleet:8000": 1, "b.fleet:8000": 1, "c.fleet:8000": 1}
                    )

                wait_until(
                    "a and b advised, every server up, on the fleet daemon's /metrics",
                    both_advised,
                    60,
                    [proc],
                )
                assert all(s.labels["model_name"] == "tiny-llama" for s in fams["vllm_advisor_up"].samples)
                knobs = {
                    (s.labels["instance"], s.labels["knob"]): (s.value, s.labels["source"])
                    for s in fams["vllm_advisor_engine_knob"].samples
                }
                assert knobs[("b.fleet:8000", "max_num_seqs")] == (10, "cmdline")  # from B's sidecar
                assert knobs[("a.fleet:8000", "max_num_seqs")][1] == "default"  # A has no sidecar

                # API and landing page: the fleet, worst first; one server by instance (waited for
                # too: a cycle whose queries time out on a loaded machine withdraws every advice,
                # as it must, and a run with three test workers on two cores read one such cycle)
                def advised(**instance: str) -> dict[str, Any] | None:
                    """The fleet's diagnosis (or one server's), where it is advice."""
                    body: dict[str, Any] = requests.get(
                        f"http://127.0.0.1:{fleet_port}/api/v1/diagnosis", params=instance, timeout=HANG_S
                    ).json()
                    return body if body["status"] == "advice" else None

                fleet_body = wait_until("the fleet's diagnosis is advice", advised, 60, [proc])
                order = [i["instance"] for i in fleet_body["instances"]]
                assert order[-1] == "c.fleet:8000", order
                one = wait_until(
                    "b's advice in its own diagnosis", lambda: advised(instance="b.fleet:8000"), 60, [proc]
                )
                assert one["recommendation"]["rule"] in ("kv-preemption-seqs-bind", "kv-preemption-capacity")
                assert one["instance"] == "b.fleet:8000"
                page = requests.get(f"http://127.0.0.1:{fleet_port}/", timeout=HANG_S).text
                assert page.index("b.fleet:8000") < page.index("c.fleet:8000")
                _each_server_has_its_own_page(f"http://127.0.0.1:{fleet_port}", tmp_path)

                def delivered() -> set[tuple[str, str]]:
                    return {
                        (a["labels"]["alertname"], a["labels"]["instance"])
                        for body in webhook[1]
                        for a in body["alerts"]
                        if a["status"] == "firing"
                    }

                got = wait_until(
                    "both alerts at the webhook",
                    lambda: both(delivered()),
                    90,
                    [proc],
                )
                assert got
                assert not any(i == "c.fleet:8000" for _, i in delivered())

                missing = requests.get(
                    f"http://127.0.0.1:{fleet_port}/api/v1/diagnosis", params={"instance": "x:1"}, timeout=5
                )
                assert missing.status_code == 404
                # bounded query load: a fixed number of requests per cycle, none per instance
                names = [
                    r["metric"]["__name__"]
                    for r in query(
                        prom_url, 'count by (__name__) ({__name__=~"vllm:.+|process_.+",job="vllm"})'
                    )
                ]
                n_families = len(family_groups([n for n in names if re.fullmatch(prom.READ_NAME_RE, n)]))
                # series + names + one per family + up + sidecars (+ metadata every 20th cycle)
                assert fleet.state().queries_last_cycle <= n_families + 5
            finally:
                runner.stop()
