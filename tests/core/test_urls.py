"""Issue 34, G15: a URL given with a query string: the path is joined before the query."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.drive import daemon, inspection
from advisor.sources import prometheus as prom
from advisor.sources import session
from tests import prom_standin
from tests.paths import FIXTURES


@pytest.mark.parametrize(
    ("given", "page"),
    [
        ("http://h:8000", "http://h:8000/metrics"),
        ("http://h:8000/", "http://h:8000/metrics"),
        ("http://h:8000/metrics", "http://h:8000/metrics"),
        ("http://h:8000/?tenant=a", "http://h:8000/metrics?tenant=a"),
        ("http://h:8000/metrics?tenant=a&x=1", "http://h:8000/metrics?tenant=a&x=1"),
        ("https://gw/vllm/a/", "https://gw/vllm/a/metrics"),
    ],
)
def test_the_page_url_keeps_the_query_after_the_path(given: str, page: str) -> None:
    assert daemon.metrics_url(given) == page
    assert inspection._metrics_url(given) == page
    base, metrics = session._metrics_url(given)
    assert metrics == page and "metrics" not in base.split("?")[0].rsplit("/", 1)[-1]


def test_prometheus_behind_a_url_with_a_query_is_asked_on_the_api_path(tmp_path: Path) -> None:
    samples, meta = prom_standin.stored_samples(FIXTURES / "sessions" / "cpu-healthy", "a:1")
    behaviour = prom_standin.Behaviour()
    with prom_standin.serve(samples, meta, behaviour) as url:
        client = prom.Client(url + "/?tenant=a")
        assert client.metadata()
    assert behaviour.requests and all(r.startswith("/api/v1/") for r in behaviour.requests), (
        behaviour.requests
    )
