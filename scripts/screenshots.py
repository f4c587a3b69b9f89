#!/usr/bin/env python3
"""Regenerate the screenshots of docs/images/ (shown in README.md) in Debian's chromium, headless
(tests/browser.py: playwright driving /usr/bin/chromium, a fresh profile, no network):

- page-advice.png: ``vllm-advisor run --replay`` of the bundled H200 session (advice, with the
  prediction beside the charts);
- page-healthy.png: the same of a healthy real vLLM CPU server (tests/fixtures/sessions/cpu-healthy);
- page-down.png: the daemon scraping a stand-in serving the H200 session's recorded pages, which
  then goes away (vLLM down: the advice withdrawn, the outage shaded);
- fleet.png: ``vllm-advisor run --prometheus`` (the fleet daemon, in this process) reading a real
  Prometheus (Debian's) that scrapes three stand-ins replaying real vLLM CPU servers (a fleet
  cannot run here: tests/fleet_standin.py).

Usage: .venv/bin/python scripts/screenshots.py [--out docs/images]   (~2 minutes; needs
`make system-deps`). Each image is the top of its page at 1200 px wide, to keep the PNGs small.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.cli.common import DEMO_SESSION  # noqa: E402
from advisor.core.config import Config  # noqa: E402
from advisor.diagnose.ruleset import load_rules  # noqa: E402
from advisor.drive.fleet import Fleet, Runner  # noqa: E402
from advisor.sources import prometheus as prom  # noqa: E402
from tests import browser, fleet_standin  # noqa: E402
from tests.daemon_helpers import Clock, make, run_cycles  # noqa: E402
from tests.promstack import free_port, prometheus  # noqa: E402
from tests.vllm_standin import StandIn, serve, session_pages  # noqa: E402

SESSIONS = ROOT / "tests" / "fixtures" / "sessions"
WIDTH = 1200


def shoot(ctx: object, url: str, out: Path, name: str, height: int) -> Path:
    loaded = browser.open_page(ctx, url)
    u = urlparse(url)
    problems = loaded.problems() + loaded.elsewhere(f"{u.scheme}://{u.netloc}")
    if problems:
        raise SystemExit(f"{url}: {problems}")
    path = browser.screenshot(loaded.page, name, out, height)
    print(f"{path} ({path.stat().st_size // 1024} KiB)")
    loaded.page.close()
    return path


def replayed(ctx: object, session: Path, work: Path, out: Path, name: str, height: int) -> None:
    with browser.replaying(session, work) as base:
        shoot(ctx, base + "/", out, name, height)


def down(ctx: object, work: Path, out: Path) -> None:
    clock = Clock()
    standin = StandIn(session_pages(DEMO_SESSION))
    with serve(standin) as url:
        d = make(url, work, clock)
        run_cycles(d, clock, len(standin.pages) - 4)
    run_cycles(d, clock, 8)
    host, port = d.serve()
    try:
        shoot(ctx, f"http://{host}:{port}/", out, "page-down.png", 1250)
    finally:
        d.stop()


def fleet(ctx: object, work: Path, out: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    speed, start = 2.0, time.time()
    replays = {
        "a": fleet_standin.session_replay(SESSIONS / "cpu-preempt-nobind", speed, start),
        "b": fleet_standin.session_replay(SESSIONS / "cpu-preempt-binds", speed, start),
        "c": fleet_standin.session_replay(SESSIONS / "cpu-healthy", speed, start),
        "d": fleet_standin.session_replay(SESSIONS / "cpu-cap-under-load", speed, start),
    }
    cfg = Config(interval_s=1.0, window_s=40.0, listen="127.0.0.1:0", state_dir=str(work / "state"))
    with fleet_standin.serve(replays) as base:
        job = fleet_standin.scrape_config("vllm", base, list(replays), lambda n: f"vllm-{n}.prod:8000")
        with prometheus(work, {}, scrape_configs=[job]) as (prom_url, _proc):
            f = Fleet(cfg, load_rules(), prom.Client(prom_url), '{job="vllm"}')
            port = free_port()
            runner = Runner(f, f"127.0.0.1:{port}")
            runner.start()
            try:
                deadline = time.monotonic() + 240
                while time.monotonic() < deadline:
                    st = f.state()
                    adv = [
                        m for m in st.members if m.state.diagnosis and m.state.diagnosis.status == "advice"
                    ]
                    if len(st.members) == 4 and len(adv) >= 2 and all(d.replicas for d in st.deployments):
                        break
                    time.sleep(2)
                else:
                    raise SystemExit("the fleet did not come to advice in 240 s")
                shoot(ctx, f"http://127.0.0.1:{port}/", out, "fleet.png", 900)
            finally:
                runner.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="advisor-shots-") as tmp, browser.chromium(WIDTH, 900) as ctx:
        work = Path(tmp)
        replayed(ctx, DEMO_SESSION, work / "advice", args.out, "page-advice.png", 1700)
        replayed(ctx, SESSIONS / "cpu-healthy", work / "healthy", args.out, "page-healthy.png", 1250)
        down(ctx, work / "down", args.out)
        fleet(ctx, work / "fleet", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
