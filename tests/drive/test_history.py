"""What the daemon gave before (advisor/drive/history.py, ``/history``): past advice with when it
began and how it ended, kept in the state dir across restarts, and the experiments it judged.

The daemon scrapes a stand-in serving pages recorded from real vLLM servers (tests/vllm_standin.py):
a real server cannot be stopped, or restarted with another knob, on cue here. The experiment is
the daemon's own, judged from two real recordings of the same load (max_num_seqs 6, then the
advised 4: tests/verify/test_live_experiment.py replays the same pair without the daemon).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import requests

from advisor.cli.common import DEMO_SESSION
from advisor.core.config import Config
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.drive.daemon import Daemon
from advisor.drive.history import FILE, AdviceHistory
from advisor.drive.inputs import from_session
from advisor.drive.runner import Advisor, base_from_session_engine
from advisor.outputs.state import AdviceSpan
from advisor.sources.session import Session
from tests.daemon_helpers import Clock, make, run_cycles
from tests.hang import HANG_S
from tests.paths import FIXTURES
from tests.vllm_standin import StandIn, serve, session_pages

RULES = load_rules()
SESSIONS = FIXTURES / "sessions"


def _advice() -> Diagnosis:
    _, d = from_session(DEMO_SESSION, Config(), RULES)
    assert d is not None and d.recommendation is not None
    return d


def _at(d: Diagnosis, t: float, **kw: object) -> Diagnosis:
    return replace(d, at=t, **kw)  # type: ignore[arg-type]


def test_advice_begins_goes_on_is_replaced_and_ends() -> None:
    d = _advice()
    rec = d.recommendation
    assert rec is not None
    h = AdviceHistory(merge_gap_s=10.0)
    h.observe(_at(d, 100.0))
    h.observe(_at(d, 105.0, recommendation=replace(rec, change=rec.change + " (moved)", proposed=1)))
    (span,) = h.newest_first()
    assert (span.began, span.ended, span.last_seen) == (100.0, None, 105.0)
    assert span.change.endswith("(moved)") and span.first_change == rec.change  # the value moved: one advice
    assert span.predicted is not None and set(span.predicted) >= {"output_tokens_per_second"}
    other = replace(
        rec, rule="kv-preemption-seqs-bind", knob="max_num_seqs", change="--max-num-seqs 256 -> 192"
    )
    h.observe(_at(d, 110.0, recommendation=other))
    first, second = h.newest_first()[::-1]
    assert (second.began, second.ended, second.rule) == (110.0, None, "kv-preemption-seqs-bind")
    assert (
        first.ended == 110.0
        and first.end_reason == "replaced by --max-num-seqs 256 -> 192 (kv-preemption-seqs-bind)"
    )
    h.observe(
        _at(d, 120.0, status="insufficient-data", reason="vLLM cannot be read: refused", recommendation=None)
    )
    assert h.newest_first()[0].end_reason == "insufficient-data: vLLM cannot be read: refused"
    # back within the merge gap: the same span again, the withdrawal counted
    h.observe(_at(d, 125.0, recommendation=other))
    assert len(h.spans) == 2 and h.newest_first()[0].ended is None and h.newest_first()[0].withdrawn == 1
    # a healthy window ends it; the same advice much later is a new one
    h.observe(_at(d, 130.0, status="healthy", reason="ok", recommendation=None))
    h.observe(_at(d, 500.0, recommendation=other))
    assert len(h.spans) == 3 and h.newest_first()[0].began == 500.0


def test_the_list_is_bounded() -> None:
    d = _advice()
    rec = d.recommendation
    assert rec is not None
    h = AdviceHistory(limit=5, merge_gap_s=0.0)
    for i in range(20):
        h.observe(_at(d, 100.0 + 10 * i, recommendation=replace(rec, current=i)))
    assert len(h.spans) == 5 and h.newest_first()[0].current == 19 and h.newest_first()[-1].current == 15


def test_kept_in_the_state_dir_and_read_back_after_a_crash(tmp_path: Path) -> None:
    d = _advice()
    path = tmp_path / FILE
    h = AdviceHistory(path)
    h.observe(_at(d, 100.0))
    h.save(100.0)
    h.observe(_at(d, 130.0))  # seen again, not yet written (at most once a minute while it stands)
    h.save(130.0)
    assert json.loads(path.read_text())["advice"][0]["last_seen"] == 100.0
    h.observe(_at(d, 170.0))
    h.save(170.0)
    # the process dies here: nothing closes the span. A new daemon reads it back as ended
    again = AdviceHistory(path)
    again.load()
    (span,) = again.newest_first()
    assert span.ended == 170.0 and span.end_reason == "the daemon stopped; advised at least until then"
    path.write_text("{not json")
    broken = AdviceHistory(path)
    broken.load()
    assert broken.error is not None and broken.error.startswith(f"cannot read {path}")
    assert not broken.spans


def test_a_span_round_trips_through_json() -> None:
    s = AdviceSpan(
        1.0, "r", "warning", "k", "increase", 3, "--k 3 -> 4", 2.0, "why", "--k 3 -> 5", {"m": [1, 2]}, 1, 2.0
    )
    assert AdviceSpan.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_the_daemons_history_page_survives_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    standin = StandIn(session_pages(DEMO_SESSION))
    with serve(standin) as url:
        d = make(url, tmp_path, clock)
        d.serve()
        try:
            run_cycles(d, clock, len(standin.pages) - 4)
            assert d.state().diagnosis.status == "advice"  # type: ignore[union-attr]
            standin.mode = "http503"
            run_cycles(d, clock, 2)
            host, port = d.server.server_address[:2]
            page = requests.get(f"http://{host}:{port}/history", timeout=HANG_S)
            assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
            assert "default-src 'none'" in page.headers["Content-Security-Policy"]
        finally:
            d.stop()
    assert "--kv-cache-memory-bytes 6442450944 -&gt; 9663676416" in page.text
    assert "insufficient-data: vLLM cannot be read" in page.text
    saved = json.loads((tmp_path / "state" / FILE).read_text())
    assert [a["change"] for a in saved["advice"]] == [
        "--kv-cache-memory-bytes 6442450944 -> 9663676416 (6 GiB -> 9 GiB)"
    ]
    again = make("http://127.0.0.1:9", tmp_path, clock)  # the same state dir, vLLM not there
    h = again.history()
    assert [a.change for a in h.advice] == [saved["advice"][0]["change"]]
    assert f"Kept in {tmp_path / 'state' / FILE}" in h.advice_kept
    assert h.experiments == () and "ledger.sqlite" in h.experiments_kept


def test_an_experiment_the_daemon_judged_is_on_its_history_page(tmp_path: Path) -> None:
    sessions = [Session.load(SESSIONS / n) for n in ("cpu-long-binds", "cpu-long-binds-after")]
    argv: list[object] = [sessions[0].meta["serve_args"]]
    clock = Clock()
    cfg = Config(
        listen="127.0.0.1:0", state_dir=str(tmp_path / "state"), interval_s=2.0, scrape_timeout_s=1.0
    )
    adv = Advisor(
        cfg,
        RULES,
        base=base_from_session_engine(sessions[0].engine, has_argv=True),
        argv_provider=lambda: argv[0],  # type: ignore[return-value]
        clock=clock,
        log_near=sessions[0].started.timestamp(),
    )
    standin = StandIn([text for _, text in sessions[0].iter_scrapes()])
    with serve(standin) as url:
        d = Daemon(cfg.with_overrides(vllm_url=url), RULES, advisor=adv, clock=clock)
        d.serve()
        try:
            run_cycles(d, clock, len(standin.pages))
            standin.mode = "http503"  # the restart with the advised value
            run_cycles(d, clock, 5)
            argv[0] = sessions[1].meta["serve_args"]
            standin.pages, standin.i, standin.mode = [t for _, t in sessions[1].iter_scrapes()], 0, "ok"
            run_cycles(d, clock, len(standin.pages))
            host, port = d.server.server_address[:2]
            text = requests.get(f"http://{host}:{port}/history", timeout=HANG_S).text
            h = d.history()
        finally:
            d.stop()
    (row,) = h.experiments
    assert (row["knob"], row["old_value"], row["new_value"], row["verdict"]) == ("max_num_seqs", 6, 4, "keep")
    assert row["id"] == 1  # written to the ledger, read back from it
    assert "--max-num-seqs 6 -&gt; 4" in text and 'class="badge keep"' in text
    assert "predicted /" in text and "measured" in text  # the prediction next to what happened


def test_advice_withdrawn_because_the_cycle_stalled_is_not_shown_as_still_advised(tmp_path: Path) -> None:
    clock = Clock()
    standin = StandIn(session_pages(DEMO_SESSION))
    with serve(standin) as url:
        d = make(url, tmp_path, clock)
        run_cycles(d, clock, len(standin.pages) - 4)
    assert d.history().advice[0].ended is None  # still advised
    clock.t += 60.0  # no cycle ran since: the exporter withdraws the advice when it is read
    (span,) = d.history().advice
    assert span.ended == clock.t
    assert span.end_reason.startswith("insufficient-data: no scrape of vLLM has completed")
