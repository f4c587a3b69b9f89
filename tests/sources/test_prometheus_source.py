"""Prometheus as a source (advisor/sources/prometheus.py): pages rebuilt from a Prometheus's
samples are the pages themselves, and ``explain --prometheus`` reaches the answer ``explain
--url`` reaches.

The unit tests turn recorded pages into the samples Prometheus stores (the page's own samples,
with the target's ``job``/``instance`` labels) and need no Prometheus. The integration tests run
a real Prometheus (Debian's package) scraping stand-ins that replay pages recorded from real vLLM
CPU servers by the clock (tests/fleet_standin.py: a fleet, or a server with a recorded problem,
cannot be run here on demand), and the real vLLM CPU server of tests/conftest.py.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from advisor.cli import main
from advisor.core.config import Config
from advisor.core.model import Provenanced
from advisor.derive.window import slim
from advisor.diagnose.ruleset import load_rules
from advisor.drive import daemon, inputs
from advisor.sources import prometheus as prom
from advisor.sources.metrics import parse_page
from advisor.sources.session import Session
from tests import fleet_standin, realvllm
from tests.paths import REPO
from tests.promstack import prometheus, query, wait_until

PAGES = REPO / "tests" / "fixtures" / "pages"
SESSIONS = REPO / "tests" / "fixtures" / "sessions"


def _as_stored(
    page: str, t: float, instance: str, job: str = "vllm"
) -> tuple[list[prom.Series], dict[str, Any]]:
    """The samples Prometheus stores for one scrape of ``page`` (target labels added), and the
    metadata it keeps (type and help per name, as the page declared them)."""
    series: list[prom.Series] = []
    meta: dict[str, tuple[str, str]] = {}
    for fam in text_string_to_metric_families(page):
        for s in fam.samples:
            series.append(
                ({"__name__": s.name, **s.labels, "job": job, "instance": instance}, [(t, s.value)])
            )
        declared = fam.name + ("_total" if fam.type == "counter" else "")
        meta[declared] = (fam.type, fam.documentation)
    return series, meta


def _same(a: Any, b: Any) -> None:
    assert sorted(a.families) == sorted(b.families)
    for name, fam in a.families.items():
        other = b.families[name]
        assert (fam.type, dict(fam.series)) == (other.type, dict(other.series)), name


@pytest.mark.parametrize(
    "page",
    ["cpu-0.32-preempt_mns16-during.prom", "h200-0.25-A_s256-peak.prom", "cpu-0.32-baseline-during.prom"],
)
@pytest.mark.parametrize("with_metadata", [True, False])
def test_rebuilt_page_is_the_parsed_page(page: str, with_metadata: bool) -> None:
    text = (PAGES / page).read_text()
    series, meta = _as_stored(text, 100.0, "10.0.0.5:8000")
    snaps = prom.snapshots(series, meta if with_metadata else None)
    assert list(snaps) == ["10.0.0.5:8000"]
    (snap,) = snaps["10.0.0.5:8000"]
    assert snap.t == 100.0
    _same(slim(snap), slim(parse_page(text, 100.0)))


def test_instances_models_and_scrapes_are_kept_apart() -> None:
    a = (PAGES / "cpu-0.32-preempt_mns16-before.prom").read_text()
    b = (PAGES / "cpu-0.32-preempt_mns16-during.prom").read_text()
    series = [
        *_as_stored(a, 10.0, "a:8000")[0],
        *_as_stored(b, 12.0, "a:8000")[0],
        *_as_stored(b, 11.0, "b:8000")[0],
    ]
    snaps = prom.snapshots(series)
    assert [s.t for s in snaps["a:8000"]] == [10.0, 12.0]
    assert [s.t for s in snaps["b:8000"]] == [11.0]
    _same(slim(snaps["a:8000"][1]), slim(parse_page(b, 0)))
    assert prom.snapshots(series, after={"a:8000": 10.0})["a:8000"][0].t == 12.0
    other = prom.snapshots(series, model="other-model")["a:8000"]
    labels = {k for snap in other for f in snap.families.values() for key in f.series for k, _ in key}
    assert "model_name" not in labels and other  # process_* and engine-wide series stay
    mine = prom.snapshots(series, model="tiny-llama")["a:8000"]
    _same(slim(mine[1]), slim(parse_page(b, 0)))


def test_selectors_are_checked() -> None:
    assert prom.selector_matchers('{job="vllm", namespace=~"prod-.*"}') == 'job="vllm",namespace=~"prod-.*"'
    assert prom.selector_matchers("") == ""
    assert prom.selector_matchers("{}") == ""
    with pytest.raises(prom.PrometheusError, match="braces"):
        prom.selector_matchers('job="vllm"')
    with pytest.raises(prom.PrometheusError, match="cannot read the matcher"):
        prom.selector_matchers("{job=vllm}")
    assert prom.quote('a"b\\') == '"a\\"b\\\\"'


def test_times() -> None:
    assert prom.parse_time("now", now=1000.0) == 1000.0
    assert prom.parse_time("-2m", now=1000.0) == 880.0
    assert prom.parse_time("1700000000") == 1700000000.0
    assert prom.parse_time("2026-01-31T14:00:00Z") == prom.parse_time("2026-01-31T14:00:00")
    assert prom.parse_time("2026-01-31T15:00:00+01:00") == prom.parse_time("2026-01-31T14:00:00Z")
    with pytest.raises(ValueError, match="cannot read the time"):
        prom.parse_time("yesterday")


def test_sidecar_knobs_belong_to_the_server_on_their_host() -> None:
    knob = {"__name__": "vllm_advisor_engine_knob", "instance": "10.0.0.5:9400", "job": "advisor"}
    samples = [
        ({**knob, "knob": "max_num_seqs", "source": "cmdline"}, 10.0),
        ({**knob, "instance": "10.0.0.6:9400", "knob": "max_num_seqs", "source": "cmdline"}, 99.0),
        (
            {**knob, "__name__": "vllm_advisor_engine_fact", "fact": "gpu_memory_bytes", "source": "host"},
            2.0**31,
        ),
    ]
    got = prom.sidecar_engine(samples, "10.0.0.5:8000")
    assert got["max_num_seqs"].value == 10 and got["max_num_seqs"].source == "cmdline"
    assert "via Prometheus" in got["max_num_seqs"].detail
    assert got["gpu_memory_gib"].value == 2.0
    assert prom.sidecar_engine(samples, "10.0.0.7:8000") == {}


def _history(session: str, instance: str = "a:8000", down_after: float | None = None) -> prom.History:

    s = Session.load(SESSIONS / session)
    series: list[prom.Series] = []
    meta: dict[str, Any] = {}
    down = []
    for t, text in s.iter_scrapes():
        if down_after is not None and t > down_after:
            down.append(t)
            continue
        ss, meta = _as_stored(text, t, instance)
        series += ss
    return prom.History(instance, tuple(prom.snapshots(series, meta)[instance]), tuple(down), {}, 0)


def test_history_replayed_gives_the_advice_and_names_unknown_knobs() -> None:
    """The recorded preemption (KV 24 MiB, max_num_seqs 10 on the command line): from
    Prometheus only the KV size is known (cache_config_info); the rest is named as unknown."""
    h = _history("cpu-preempt-nobind")
    at = h.snapshots[-1].t
    _, d = inputs.from_prometheus(h, Config(), load_rules(), at, 120.0)
    assert d.status == "advice" and d.recommendation is not None
    assert (d.recommendation.rule, d.recommendation.knob) == (
        "kv-preemption-capacity",
        "kv_cache_memory_bytes",
    )
    assert d.recommendation.current == 25165824 and d.recommendation.current_source == "metrics"
    assert "max_num_seqs" in d.context["knobs_unknown"]
    assert "kv_cache_memory_bytes" not in d.context["knobs_unknown"]
    assert d.context["instance"] == "a:8000"


def test_a_server_down_at_the_end_gets_no_advice() -> None:
    h0 = _history("cpu-preempt-nobind")
    h = _history("cpu-preempt-nobind", down_after=h0.snapshots[-10].t)
    _, d = inputs.from_prometheus(h, Config(), load_rules(), h.down[-1], 120.0)
    assert d.status == "insufficient-data" and d.recommendation is None
    assert "up == 0" in d.reason


def test_sidecar_knobs_win_over_defaults() -> None:
    h = _history("cpu-preempt-binds")
    h = prom.History(h.instance, h.snapshots, (), {"max_num_seqs": Provenanced(10, "cmdline", "sidecar")}, 0)
    _, d = inputs.from_prometheus(h, Config(), load_rules(), h.snapshots[-1].t, 120.0)
    assert d.recommendation is not None and d.recommendation.rule == "kv-preemption-seqs-bind"
    assert "max_num_seqs" not in d.context["knobs_unknown"]


# ---------------------------------------------------------------------- with a real Prometheus
def _observe(url: str, window_s: float, out: dict[str, Any], state_dir: Path) -> None:
    cfg = Config(state_dir=str(state_dir))  # observe() persists nothing
    # every 2 s (the deadline of a page 1.6 s): two watches and the stand-ins share this process,
    # and on a busy machine pages asked every second missed their 0.8 s deadline for 13 s of a
    # 30 s window ("only 17s of data"), or at its end
    out["d"] = daemon.observe(url, cfg, load_rules(), window_s, 2.0, progress=False)
    out["end"] = time.time()


LAST_SCRAPE_SLACK_S = 10.0  # how far before the URL's reading the last good scrape may lie


def _last_scraped(prom_url: str, instance: str, end: float, window_s: float) -> float:
    """The time of Prometheus's last successful scrape of ``instance`` at or before ``end``: where
    the CPU server, busy with its load beside the suite, answered a scrape later than the 1 s
    timeout, ``up`` was 0 at ``end`` and ``explain --prometheus`` rightly refused to read it (a
    make test run of 2026-12-06). The two paths then compare the same window ending at most
    ``LAST_SCRAPE_SLACK_S`` apart."""
    series = query(prom_url, f'up{{instance="{instance}"}}[{window_s + 30:g}s]')
    good = [float(ts) for s in series for ts, v in s["values"] if float(v) == 1 and float(ts) <= end]
    assert good and max(good) >= end - LAST_SCRAPE_SLACK_S, (instance, end, series)
    return max(good)


@pytest.mark.prometheus
@pytest.mark.realvllm
def test_explain_prometheus_matches_explain_url(tmp_path: Path, vllm_server: realvllm.VllmServer) -> None:
    """A real Prometheus scrapes a fleet: the real vLLM CPU server (under a light load) and two
    stand-ins replaying recorded real servers (a KV-bound preemption, a healthy one; stand-ins
    because a server with a given problem cannot be had on demand here). For the real server
    and the preempting stand-in, ``explain --url`` watches the server while Prometheus scrapes
    it; ``explain --prometheus`` over the same window then gives the same status and the same
    recommendation (rule, knob, value). Rebuilt pages match the served ones series for series."""
    replays = {
        # its load goes on as in its middle half for as long as the test reads it. A make test
        # run of 2026-12-06 had the URL path say "the model cannot be fitted to this window"
        # where Prometheus's read advised; the likely cause (not reproduced): 16 cycles of the
        # URL path, each stretched by seconds on a busy machine, carried its 30 s window past
        # the recorded load (48 s), leaving it idle pages and no busy interval between two of
        # them, while Prometheus, scraping every second, still held some
        "preempt": fleet_standin.session_replay(SESSIONS / "cpu-preempt-nobind", speed=1.0, steady=True),
        "healthy": fleet_standin.session_replay(SESSIONS / "cpu-healthy", speed=1.0),
    }
    # the diagnosis needs min_window_s (20 s) of data: 30 s is that and five recorded pages more
    window_s = 30.0
    with fleet_standin.serve(replays) as base:
        job = fleet_standin.scrape_config("vllm", base, list(replays), lambda n: f"{n}.fleet:8000")
        real = vllm_server.url.split("://", 1)[1]
        job["static_configs"].append({"targets": [real]})
        with prometheus(tmp_path, {}, scrape_configs=[job]) as (prom_url, proc):
            wait_until("3 targets up", lambda: len(query(prom_url, 'up{job="vllm"} == 1')) == 3, 30, [proc])
            # from threads of the test: the requests run from the start of the window (a benchmark
            # client imports vLLM first, which took most of a 30 s window on a busy machine)
            load = realvllm.RequestLoad(
                vllm_server.url, input_len=128, output_len=64, num_prompts=400, concurrency=4, timeout_s=240
            )
            try:
                # the preempting recording idles before its load: replay it from the load's start,
                # so that the window holds the preemption (a 60 s window waited through the idle
                # part before; the test took 78 s in make test)
                replays["preempt"].start = time.time() - fleet_standin.idle_s(SESSIONS / "cpu-preempt-nobind")
                results: dict[str, dict[str, Any]] = {"preempt": {}, "real": {}}
                threads = [
                    threading.Thread(
                        target=_observe,
                        args=(f"{base}/s/preempt", window_s, results["preempt"], tmp_path / "a"),
                    ),
                    threading.Thread(
                        target=_observe, args=(vllm_server.url, window_s, results["real"], tmp_path / "b")
                    ),
                ]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join(timeout=window_s + 60)
            finally:
                load.kill()
            time.sleep(2)  # Prometheus's last scrape of the window is in
            signals: dict[str, dict[str, Any]] = {}
            for name, instance in (("preempt", "preempt.fleet:8000"), ("real", real)):
                url_d = results[name]["d"]
                at = _last_scraped(prom_url, instance, results[name]["end"], window_s)
                runner = CliRunner()
                res = runner.invoke(
                    main,
                    [
                        "explain",
                        "--prometheus",
                        prom_url,
                        "--instance",
                        instance,
                        "--at",
                        f"{at:.3f}",
                        "--window",
                        f"{window_s:g}s",
                        "--format",
                        "json",
                    ],
                )
                assert res.exit_code == 0, res.output
                prom_d = json.loads(res.output)
                signals[name] = prom_d["signals"]
                rec = prom_d["recommendation"]
                want = url_d.recommendation
                assert prom_d["status"] == url_d.status, (name, prom_d["reason"], url_d.reason)
                if want is None:
                    assert rec is None
                else:
                    assert (rec["rule"], rec["knob"]) == (want.rule, want.knob)
                    # the value is the model's pick among the same candidates (issue 13); the two
                    # paths read the same server at different instants of a 60 s window, and the
                    # pick between two candidates (on cpu-preempt-nobind, +25% and +50% KV) may
                    # differ between the two readings (a CI run: 30 MiB from Prometheus, 36 MiB
                    # from the URL). Both must be candidates both paths weighed
                    seen = {c["value"] for c in (want.predicted or {}).get("considered", [])}
                    seen_prom = {c["value"] for c in (rec.get("predicted") or {}).get("considered", [])}
                    if rec["proposed"] != want.proposed:
                        assert seen and seen == seen_prom, (seen, seen_prom)
                        assert {rec["proposed"], want.proposed} <= seen, (
                            rec["proposed"],
                            want.proposed,
                            seen,
                        )
            assert results["preempt"]["d"].status == "advice", "the recorded preemption must be advised"
            # the real server was read while it served requests (not a comparison of two blanks);
            # which status is the machine's: idle, its light load is healthy; beside other work its
            # TTFT can breach the target with no knob to help (inconclusive), as both paths said
            assert results["real"]["d"].status in ("healthy", "advice", "inconclusive"), results["real"][
                "d"
            ].reason
            for name in ("requests_per_second", "generation_tokens_per_second"):
                a, b = results["real"]["d"].signals[name], signals["real"][name]
                assert a and b and abs(a - b) / a < 0.25, (name, a, b)
            # every scrape Prometheus holds is a page the stand-in served, series for series
            hist = prom.read_history(prom.Client(prom_url), "healthy.fleet:8000", time.time(), 30.0)
            served = [slim(parse_page(p, 0)) for p in replays["healthy"].pages]
            for snap in hist.snapshots:
                rebuilt = slim(snap)
                assert any(
                    sorted(rebuilt.families) == sorted(s.families)
                    and all(
                        dict(rebuilt.families[n].series) == dict(s.families[n].series) for n in s.families
                    )
                    for s in served
                )
            assert hist.queries <= 4
