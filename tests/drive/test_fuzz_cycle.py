"""Fuzzing (hypothesis) of the daemon's cycle on mutated real pages (issue 23).

Each example is a run of 12 consecutive pages of the bundled H200 recording (its loaded part:
217 requests waiting, the KV cache full), some of them made hostile (tests/fuzzing.py: NaN,
infinities, negative and huge readings, a series twice, a counter scaled for one page, a
histogram above its # HELP line, characters edited, the page cut), served by the vLLM stand-in
(tests/vllm_standin.py: a real vLLM cannot be made to answer with these pages) to a real
`Daemon`, one `cycle()` per page at the recording's pace. Asserted after every cycle: the cycle
raised nothing inside (no "internal error", no scrape counted as `error`); once a page with a
non-finite reading of a family the advisor reads was fed, the status is never "healthy"; and at
the end /api/v1/diagnosis, /healthz and diagnosis.json are valid JSON (no bare NaN) and /metrics
is valid Prometheus text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from advisor.cli.common import DEMO_SESSION
from advisor.sources.session import Session
from tests.daemon_helpers import Clock, make
from tests.fuzzing import fuzz, page_mutation
from tests.hang import HANG_S
from tests.vllm_standin import StandIn, serve

SCRAPES = list(Session.load(DEMO_SESSION).iter_scrapes())
RUN = 12


def strict(text: str) -> Any:
    def refuse(word: str) -> None:
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def standin() -> Iterator[tuple[StandIn, str]]:
    s = StandIn([SCRAPES[0][1]])
    with serve(s) as url:
        yield s, url


@st.composite
def runs(draw: Any) -> list[tuple[float, str, bool]]:
    start = draw(st.integers(10, len(SCRAPES) - RUN))
    out = []
    for t, text in SCRAPES[start : start + RUN]:
        if draw(st.integers(0, 9)) < 3:
            text, poisoned = draw(page_mutation(text))
        else:
            poisoned = False
        out.append((t, text, poisoned))
    return out


@pytest.mark.slow  # 480 cycles: ~50 s
@fuzz(40, deadline_s=60.0)
@given(runs())
def test_the_cycle_on_hostile_pages(
    standin: tuple[StandIn, str], tmp_path_factory: pytest.TempPathFactory, run: list[tuple[float, str, bool]]
) -> None:
    """Inputs: 40 runs of 12 pages (480 cycles), about 3 pages in 10 made hostile."""
    s, url = standin
    s.pages, s.i, s.mode = [text for _, text, _ in run], 0, "ok"
    clock = Clock()
    state_dir: Path = tmp_path_factory.mktemp("fuzz-cycle")
    d = make(url, state_dir, clock)
    d.serve()
    try:
        untrusted = False
        for t, _text, poisoned in run:
            clock.t = t
            other = d.advisor.stats.scrapes.get("other_server", 0)
            diag = d.cycle()
            fed = d.advisor.stats.scrapes.get("other_server", 0) == other
            untrusted |= poisoned and fed
            assert not diag.reason.startswith("internal error"), diag.reason
            assert "error" not in d.advisor.stats.scrapes, d.advisor.stats.last_error
            if untrusted:
                assert diag.status != "healthy", diag.reason
        host, port = d.server.server_address[:2]
        base = f"http://{host}:{port}"
        strict(requests.get(base + "/api/v1/diagnosis", timeout=HANG_S).text)
        strict(requests.get(base + "/healthz", timeout=HANG_S).text)
        list(text_string_to_metric_families(requests.get(base + "/metrics", timeout=HANG_S).text))
        strict((Path(d.cfg.state_dir) / "diagnosis.json").read_text())
    finally:
        d.stop()
