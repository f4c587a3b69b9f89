"""The stat-logger plugin's series on vLLM's page: read by the page parser (summaries whole:
quantiles, count and sum per label set), checked against prometheus_client's reading of the same
page, and kept out when they are not the plugin's."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from advisor.core.model import Summary
from advisor.plugin import names as pn
from advisor.sources import metrics as m
from advisor.sources.session import Session
from tests.paths import FIXTURES

SESSION = FIXTURES / "sessions" / "cpu-plugin-mixed"


def last_page() -> tuple[float, str]:
    return list(Session.load(SESSION).iter_scrapes())[-1]


def test_a_summary_is_one_series_per_label_set_with_its_quantiles_count_and_sum() -> None:
    """On a real page (vLLM 0.32 with the plugin), every plugin summary series as the reference
    parser reads it, sample for sample."""
    t, text = last_page()
    snap = m.parse_page(text, t)
    assert not snap.warnings
    ref: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for f in text_string_to_metric_families(text):
        if f.name.startswith(pn.PREFIX):
            for smp in f.samples:
                ref[(smp.name, frozenset(smp.labels.items()))] = smp.value
    checked = 0
    for name in pn.SUMMARY_NAMES:
        fam = snap.families[name]
        assert fam.type == "summary"
        for key, sm in fam.series.items():
            assert isinstance(sm, Summary)
            labels = dict(key)
            assert "quantile" not in labels
            assert sm.count == ref[(name + "_count", frozenset(labels.items()))]
            assert sm.sum == ref[(name + "_sum", frozenset(labels.items()))]
            assert [q for q, _ in sm.quantiles] == sorted(q for q, _ in sm.quantiles)
            for q, v in sm.quantiles:
                assert v == ref[(name, frozenset({**labels, "quantile": repr(q)}.items()))]
                checked += 1
    assert checked > 100
    e2e = snap.families[pn.REQUEST_E2E].series
    by_prompt = {
        dict(k)["prompt_bucket"]: sm.count for k, sm in e2e.items() if dict(k)["output_bucket"] == pn.ALL
    }
    assert by_prompt["all"] == sum(c for b, c in by_prompt.items() if b != "all") == 128
    # the plugin's counters are read like vLLM's (canonical name without _total)
    assert snap.total(pn.STEPS) == ref[(pn.STEPS + "_total", frozenset({("engine", "0")}))]
    assert snap.info_labels(pn.PLUGIN_INFO)[0]["vllm_version"] == "0.32.0"


def test_a_summary_without_its_count_is_skipped_and_named_and_nan_quantiles_are_no_reading() -> None:
    text = (
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
        f"# TYPE {pn.REQUEST_TTFT} summary\n"
        f'{pn.REQUEST_TTFT}{{prompt_bucket="all",quantile="0.5"}} NaN\n'
        f'{pn.REQUEST_TTFT}{{prompt_bucket="all",quantile="0.95"}} 0.25\n'
        f'{pn.REQUEST_TTFT}_count{{prompt_bucket="all"}} 3\n'
        f'{pn.REQUEST_TTFT}_sum{{prompt_bucket="all"}} 0.6\n'
        f'{pn.REQUEST_TTFT}{{prompt_bucket="0-512",quantile="0.5"}} 0.1\n'
    )
    snap = m.parse_page(text, 0.0)
    series = snap.families[pn.REQUEST_TTFT].series
    assert series == {(("prompt_bucket", "all"),): Summary(((0.95, 0.25),), 3.0, 0.6)}
    assert [w.reason for w in snap.warnings] == ["summary without _count: skipped"]
    assert snap.warnings[0].line == 8


def test_the_api_servers_other_series_stay_unread() -> None:
    t, text = last_page()
    assert "http_requests_total" in text
    snap = m.parse_page(text, t)
    assert pn.FIT_STEPS in snap.families and pn.PLUGIN_INFO in snap.families
    assert not [n for n in snap.families if n.startswith(("http_", "python_"))]
