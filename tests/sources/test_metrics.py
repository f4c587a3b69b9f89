"""sources/metrics: parsing real pages of several vLLM versions, and every fetch failure."""

from __future__ import annotations

import glob
import http.server
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from advisor.core import names
from advisor.sources import metrics as m
from tests.http_standin import serving
from tests.pages import PAGES, as_ray, as_v0, page, with_engines

REAL_PAGES = sorted(glob.glob(str(PAGES / "*.prom")))

CORE = [
    names.NUM_RUNNING,
    names.NUM_WAITING,
    names.KV_CACHE_USAGE,
    names.NUM_PREEMPTIONS,
    names.PROMPT_TOKENS,
    names.GENERATION_TOKENS,
    names.TTFT,
    names.ITL,
    names.TPOT,
    names.E2E,
    names.QUEUE_TIME,
    names.REQUEST_PROMPT_TOKENS,
    names.CACHE_CONFIG_INFO,
]


@pytest.mark.parametrize("path", REAL_PAGES, ids=lambda p: Path(p).name)
def test_every_committed_real_page_parses_with_canonical_names(path: str) -> None:
    snap = m.read_file(path)
    for fam in CORE:
        assert snap.has(fam), f"{fam} missing from {path}"
    assert not any(n.endswith("_created") for n in snap.families)
    assert m.engines(snap) == ["0"]
    assert len(m.model_names(snap)) == 1


def test_every_captured_page_is_committed() -> None:
    """All 24 single-page captures the team holds (vLLM 0.25 on an H200: 3 scenarios; 0.32 on CPU: 5)
    are copies in tests/fixtures/pages, so the test above parses every one of them."""
    assert len(REAL_PAGES) >= 24
    assert {Path(p).name.rsplit("-", 1)[0] for p in REAL_PAGES} >= {
        "h200-0.25-A_s256",
        "h200-0.25-C_b2048",
        "h200-0.25-C_b16384",
        "cpu-0.32-baseline",
        "cpu-0.32-mnbt_512",
        "cpu-0.32-mnbt_4096",
        "cpu-0.32-preempt_mns8",
        "cpu-0.32-preempt_mns16",
    }


def test_counter_values_and_histograms_from_a_real_preemption_page() -> None:
    snap = m.parse_page(page("cpu-0.32-preempt_mns16-after.prom"), t=0)
    assert snap.total(names.NUM_PREEMPTIONS) == 48.0  # the run's delta, known from the lab
    ttft = snap.histogram(names.TTFT)
    assert ttft is not None and ttft.count == 64  # 64 requests in the run
    assert ttft.buckets[-1][0] == float("inf")
    info = snap.info_labels(names.CACHE_CONFIG_INFO)[0]
    assert info["kv_cache_size_tokens"] == "3072"


def test_iteration_tokens_total_is_a_histogram_not_a_counter() -> None:
    snap = m.parse_page(page("h200-0.25-A_s256-after.prom"), t=0)
    assert snap.families[names.ITERATION_TOKENS].type == "histogram"
    assert snap.histogram(names.ITERATION_TOKENS) is not None


def test_v0_names_are_read_as_their_v1_names() -> None:
    """Stand-in: a real 0.32 page respelled as vLLM V0 (cannot run V0 here)."""
    text = as_v0(page("cpu-0.32-preempt_mns16-during.prom"))
    assert "vllm:gpu_cache_usage_perc" in text and 'engine="0"' not in text
    snap = m.parse_page(text, t=0)
    v1 = m.parse_page(page("cpu-0.32-preempt_mns16-during.prom"), t=0)
    assert snap.mean(names.KV_CACHE_USAGE) == pytest.approx(v1.mean(names.KV_CACHE_USAGE))
    assert snap.histogram(names.ITL).count == v1.histogram(names.ITL).count  # type: ignore[union-attr]
    assert snap.total(names.PREFIX_CACHE_QUERIES) == v1.total(names.PREFIX_CACHE_QUERIES)
    assert snap.has(names.NUM_SWAPPED) and snap.has(names.AVG_GENERATION_THROUGHPUT)
    assert m.engines(snap) == []


def test_ray_prefix_and_untyped_counters_with_total() -> None:
    """Stand-in: Ray's exporter spelling of a real page (no TYPE lines, so `_total` stays on the name)."""
    snap = m.parse_page(as_ray(page("cpu-0.32-preempt_mns16-after.prom")), t=0)
    assert snap.total(names.NUM_PREEMPTIONS) == 48.0
    assert snap.total(names.GENERATION_TOKENS) is not None
    assert snap.mean(names.KV_CACHE_USAGE) is not None


def test_engines_aggregate_by_sum_for_counters_mean_for_ratios_and_merged_buckets() -> None:
    """Stand-in: a data-parallel page with 4 engines derived from a real one (no DP on this box)."""
    base = m.parse_page(page("cpu-0.32-preempt_mns16-during.prom"), t=0)
    snap = m.parse_page(with_engines(page("cpu-0.32-preempt_mns16-during.prom"), 4), t=0)
    assert m.engines(snap) == ["0", "1", "2", "3"]
    # counters: 1+2+3+4 = 10 times engine 0
    assert snap.total(names.NUM_PREEMPTIONS) == pytest.approx(10 * base.total(names.NUM_PREEMPTIONS))
    # ratios: averaged, never summed
    assert snap.mean(names.KV_CACHE_USAGE) == pytest.approx(base.mean(names.KV_CACHE_USAGE))
    # histograms: buckets merged
    h, h0 = snap.histogram(names.TTFT), base.histogram(names.TTFT)
    assert h is not None and h0 is not None and h.count == pytest.approx(10 * h0.count)
    # per engine
    assert snap.total(names.NUM_PREEMPTIONS, {"engine": "2"}) == pytest.approx(
        3 * base.total(names.NUM_PREEMPTIONS)
    )


def test_histogram_labels_in_any_order() -> None:
    text = (
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="a",engine="0"} 1\n'
        'vllm:time_to_first_token_seconds_bucket{model_name="a",engine="0",le="1.0"} 3\n'
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="a"} 4\n'
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="a"} 4\n'
        'vllm:time_to_first_token_seconds_sum{model_name="a",engine="0"} 2.5\n'
    )
    h = m.parse_page(text, t=0).histogram(names.TTFT)
    assert h is not None and h.buckets == ((0.1, 1.0), (1.0, 3.0), (float("inf"), 4.0)) and h.sum == 2.5


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("", "not_prometheus"),
        ("<!DOCTYPE html><html><body>502 Bad Gateway</body></html>\n", "not_prometheus"),
        ('{"error": "nope"}\n', "not_prometheus"),
        ("this is not { prometheus text\n", "not_prometheus"),
        ("\x00\x01\x02binary\xff\n", "not_prometheus"),
    ],
)
def test_bad_pages_get_a_clear_error(text: str, kind: str) -> None:
    with pytest.raises(m.MetricsError) as e:
        m.parse_page(text, t=0)
    assert e.value.kind == kind


def test_a_page_cut_in_the_middle_is_read_up_to_the_cut_and_says_so() -> None:
    """Issue 14: a cut page is not refused whole; what is cut is skipped and named."""
    text = page("cpu-0.32-preempt_mns16-during.prom")
    for cut in (len(text) // 3, len(text) // 2, len(text) - 7):
        snap = m.parse_page(text[:cut], t=0)
        assert snap.warnings and any("newline" in w.reason for w in snap.warnings)
        whole = m.parse_page(text, t=0)
        for name, fam in snap.families.items():  # nothing half read: what is kept is as on the whole page
            for key, v in fam.series.items():
                if not (cut == len(text) - 7 and name == "vllm:cache_config_info"):
                    assert whole.families[name].series[key] == v, (cut, name, key)
    # cut exactly at a line end inside a histogram: no +Inf bucket, that histogram is skipped
    i = text.index('vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001"')
    snap = m.parse_page(text[: text.index("\n", i) + 1], t=0)
    assert not snap.has(names.TTFT) and [w.family for w in snap.warnings] == [names.TTFT]


# ---------------------------------------------------------------- fetch over HTTP


class _Handler(http.server.BaseHTTPRequestHandler):
    mode = "ok"

    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:
        mode = type(self).mode
        if mode == "slow":
            time.sleep(3)
        if mode == "http500":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"oops")
            return
        body = page("cpu-0.32-baseline-during.prom").encode()
        ctype = "text/plain; version=0.0.4"
        if mode == "html":
            body, ctype = b"<html><body>login</body></html>", "text/html"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        if mode == "cut":
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture()
def server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("H", (_Handler,), {"mode": "ok"})
    with serving(handler) as url:
        yield f"{url}/metrics", handler


def test_fetch_ok(server: tuple[str, type[_Handler]]) -> None:
    url, _ = server
    p = m.fetch(url, timeout_s=5)
    assert m.parse_page(p.text, p.t).has(names.NUM_RUNNING)


@pytest.mark.parametrize(
    ("mode", "kind"), [("http500", "http"), ("html", "not_prometheus"), ("slow", "timeout")]
)
def test_fetch_failures_are_distinct(server: tuple[str, type[_Handler]], mode: str, kind: str) -> None:
    url, handler = server
    handler.mode = mode
    with pytest.raises(m.MetricsError) as e:
        m.fetch(url, timeout_s=1)
    assert e.value.kind == kind
    assert url in str(e.value)


def test_fetch_truncated_body(server: tuple[str, type[_Handler]]) -> None:
    url, handler = server
    handler.mode = "cut"
    with pytest.raises(m.MetricsError) as e:
        p = m.fetch(url, timeout_s=5)
        m.parse_page(p.text, p.t)
    assert e.value.kind == "truncated"


def test_fetch_refused() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(m.MetricsError) as e:
        m.fetch(f"http://127.0.0.1:{port}/metrics", timeout_s=2)
    assert e.value.kind == "refused"


def test_a_page_without_vllm_metrics_is_named_as_such() -> None:
    """e.g. node_exporter's page given by mistake."""
    with pytest.raises(m.MetricsError) as e:
        m.parse_page("# TYPE node_load1 gauge\nnode_load1 0.5\n", t=0)
    assert e.value.kind == "not_prometheus" and "no vLLM metrics" in str(e.value)
