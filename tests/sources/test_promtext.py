"""The fast page parser against prometheus_client (the reference), sample for sample.

Differential: every page in tests/fixtures (pages and recorded sessions, as captured and
rewritten into other vLLM spellings and 8 engines), pages of other exporters built here
with prometheus_client (escaped labels, summaries, info, enums, untyped), and fuzzed input
(hypothesis: generated pages and mutated real pages). Where the reference reads a page, the
fast path must read the same families and series and say nothing is wrong; where it refuses
one, the fast path must not raise (other than MetricsError for what is not Prometheus text).

Tolerance (issue 14, issue 17 #2): a page cut inside a histogram, a hand-elided line, a
histogram pasted without its TYPE line, Triton's `model` label, and bad samples.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, Info, Summary
from prometheus_client.exposition import generate_latest

from advisor.core import names
from advisor.core.config import Config
from advisor.core.model import Histogram as Hist
from advisor.core.model import Snapshot
from advisor.diagnose.ruleset import load_rules
from advisor.drive.runner import Advisor, ReplayClock
from advisor.outputs.exporter import make_registry
from advisor.outputs.state import ExportState
from advisor.sources import metrics as m
from advisor.sources import promtext
from advisor.sources.session import Session
from tests.pages import PAGES, as_ray, as_utf8, as_v0, page, with_engines
from tests.paths import FIXTURES

SESSIONS = sorted((FIXTURES / "sessions").iterdir())


def norm(s: Snapshot) -> dict[str, Any]:
    """A snapshot as plain values, NaN made comparable."""

    def v(x: Any) -> Any:
        if isinstance(x, Hist):
            return (tuple((b, v(c)) for b, c in x.buckets), v(x.count), v(x.sum))
        return "NaN" if isinstance(x, float) and math.isnan(x) else x

    return {
        n: (f.type, f.help, f.source_name, {k: v(x) for k, x in f.series.items()})
        for n, f in s.families.items()
    }


def raw_samples(raws: list[promtext.RawFamily]) -> list[tuple[Any, ...]]:
    """Tokenized families sample by sample (creation timestamps, never read, left out)."""
    return [
        (r.name, r.type, r.help, [(s[0], s[1], s[2], "NaN" if s[3] != s[3] else s[3]) for s in r.samples])
        for r in raws
        if not r.name.endswith("_created")
    ]


def same_as_reference(
    text: str, keep: tuple[str, ...] | None = m.KEEP_PREFIXES, read: frozenset[str] | None = m.READ_DEFAULT
) -> Snapshot:
    fast = m.parse_page(text, 1.0, keep=keep, read=read)
    ref = m.parse_page_reference(text, 1.0, keep=keep, read=read)
    assert fast.warnings == ()
    assert norm(fast) == norm(ref)
    # and before assembly: the same families, in the same order, sample for sample
    names_read = None if read is None or keep is None else names.READ_SPELLINGS
    tokens = promtext.tokenize(text, keep, [], drop_unterminated=True, read=names_read)
    assert raw_samples(tokens) == raw_samples(promtext.tokenize_reference(text, keep, names_read))
    return fast


def _session_pages() -> list[tuple[str, str, bool]]:
    """Each session's first, middle and last page; the middle one also as a data-parallel
    server's (eight engines: the rewrite is the same for a session's every page, and it was
    two thirds of this test's ~30 s of CPU on all three)."""
    out = []
    for d in SESSIONS:
        scrapes = list(Session.load(d).iter_scrapes())
        mid = len(scrapes) // 2
        for i in sorted({0, mid, len(scrapes) - 1}):
            out.append((f"{d.name}[{i}]", scrapes[i][1], i == mid))
    return out


PAGES_LIST = sorted(PAGES.glob("*.prom"))
FIXTURE_PAGES = [(p.name, p.read_text(), True) for p in PAGES_LIST] + _session_pages()


@pytest.mark.parametrize(("name", "text", "engines"), FIXTURE_PAGES, ids=[n for n, _, _ in FIXTURE_PAGES])
def test_every_fixture_page_reads_as_the_reference_reads_it(name: str, text: str, engines: bool) -> None:
    snap = same_as_reference(text)
    assert snap.has(names.NUM_RUNNING) and snap.has(names.TTFT)
    same_as_reference(text, keep=None)  # the whole page, the API server's series included
    if engines:
        same_as_reference(with_engines(text, 8))  # a data-parallel server (rewritten: tests/pages.py)
    same_as_reference(as_v0(text))  # V0 spellings (rewritten)
    same_as_reference(as_ray(text))  # Ray's exporter: no TYPE/HELP lines (rewritten)


def _other_exporter_page() -> str:
    """A page of another exporter, written by prometheus_client itself: every metric type,
    label values with quotes, backslashes, newlines, braces, commas and non-ASCII."""
    reg = CollectorRegistry()
    c = Counter("vllm:weird_requests", "Counter with \\ and \n in help", ["model_name", "path"], registry=reg)
    for label in ('a"b', "c\\d", "e\nf", "g}h{", "i,j=k", "ünï cödé", ""):
        c.labels(model_name=label, path="/v1/x y").inc(3)
    g = Gauge("vllm:weird_gauge", "g", ["engine"], registry=reg)
    g.labels(engine="0").set(float("nan"))
    g.labels(engine="1").set(float("inf"))
    g.labels(engine="2").set(-1.5e-300)
    h = Histogram("vllm:weird_hist_seconds", "h", ["engine"], buckets=(0.1, 1, 10), registry=reg)
    for x in (0.05, 0.5, 5, 50):
        h.labels(engine="0").observe(x)
    s = Summary("vllm:weird_summary", "s", registry=reg)
    s.observe(3)
    Info("vllm:weird_build", "i", registry=reg).info({"version": "1.2.3", "commit": 'x"y'})
    Enum("vllm:weird_state", "e", states=["a", "b"], registry=reg).state("b")
    return generate_latest(reg).decode() + 'vllm:untyped_thing{a="1"} 7 1700000000000\nvllm:bare 3\n'


def test_pages_of_other_exporters_read_as_the_reference_reads_them() -> None:
    text = _other_exporter_page()
    snap = same_as_reference(text, keep=None)
    assert snap.histogram("vllm:weird_hist_seconds") is not None
    assert snap.total("vllm:weird_requests", {"model_name": 'a"b'}) == 3
    assert snap.total("vllm:weird_requests", {"model_name": "e\nf"}) == 3
    same_as_reference(text, read=None)  # every vllm: family, not only those the advisor reads
    # the advisor's own exporter page (prometheus_client again, other names)

    own = generate_latest(make_registry(lambda: ExportState(None, True, ()))).decode()
    same_as_reference(own, keep=None)


# ---------------------------------------------------------------- fuzzing
_NAMES = st.sampled_from(
    ["vllm:a", "vllm:a_total", "vllm:h", "vllm:h_bucket", "vllm:h_count", "vllm:h_sum", "vllm:b_created", "x"]
)
_LABEL_VALUES = st.text(alphabet=st.sampled_from('ab0,="{}\\\n é'), max_size=6)
_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "1" * 400, "abc", "1_0", "0x1", ""]),
)


def _line(draw: Any) -> str:
    kind = draw(st.sampled_from(["sample", "sample", "sample", "type", "help", "comment", "blank"]))
    name = draw(_NAMES)
    if kind == "type":
        return f"# TYPE {name} {draw(st.sampled_from(['counter', 'gauge', 'histogram', 'summary', 'untyped', 'bogus']))}"
    if kind == "help":
        return f"# HELP {name} {draw(st.text(max_size=8))}"
    if kind == "comment":
        return "# " + draw(st.text(max_size=10))
    if kind == "blank":
        return ""
    labels = draw(
        st.dictionaries(
            st.sampled_from(["engine", "le", "model", "model_name", "_x"]), _LABEL_VALUES, max_size=3
        )
    )
    body = ",".join(f'{k}="{v}"' for k, v in labels.items())
    ts = draw(st.sampled_from(["", " 123", " x"]))
    return (
        f"{name}{{{body}}} {draw(_VALUES)}{ts}"
        if labels or draw(st.booleans())
        else f"{name} {draw(_VALUES)}"
    )


@st.composite
def pages(draw: Any) -> str:
    return "\n".join(_line(draw) for _ in range(draw(st.integers(1, 25)))) + draw(st.sampled_from(["\n", ""]))


def check(text: str, keep: tuple[str, ...] | None) -> None:
    try:
        fast = m.parse_page(text, 1.0, keep=keep, strict=False)
    except m.MetricsError as e:
        assert e.kind == "not_prometheus"
        fast = None
    try:
        ref = m.parse_page_reference(text, 1.0, keep=keep)
    except m.MetricsError:
        return  # the reference refuses the page: the fast path only had not to raise
    if fast is not None and not fast.warnings:
        assert norm(fast) == norm(ref)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pages(), st.sampled_from([m.KEEP_PREFIXES, None]))
def test_fuzzed_pages_read_as_the_reference_or_warn(text: str, keep: tuple[str, ...] | None) -> None:
    check(text, keep)


_BASE = page("cpu-0.32-preempt_mns16-during.prom")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(_BASE) - 1), st.integers(0, 3), st.sampled_from(list('{}",=\n #\\ a1.e+_'))
        ),
        min_size=1,
        max_size=6,
    )
)
def test_mutated_real_pages_never_raise(edits: list[tuple[int, int, str]]) -> None:
    """A real vLLM page with a few characters deleted, replaced or inserted."""
    text = _BASE
    for pos, op, ch in edits:
        if op == 0:
            text = text[:pos] + text[pos + 1 :]
        elif op == 1:
            text = text[:pos] + ch + text[pos + 1 :]
        elif op == 2:
            text = text[:pos] + ch + text[pos:]
        else:
            text = text[:pos]
    check(text, m.KEEP_PREFIXES)


# ---------------------------------------------------------------- tolerance
def _lineno(text: str, needle: str) -> int:
    return text[: text.index(needle)].count("\n") + 1


def test_a_page_cut_inside_a_histogram_keeps_the_rest_and_says_where() -> None:
    text = page("cpu-0.32-preempt_mns16-during.prom")
    cut_at = 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001"'
    i = text.index(cut_at)
    snap = m.parse_page(text[: text.index("\n", i) + 1], t=0)
    assert snap.has(names.NUM_RUNNING) and snap.has(names.KV_CACHE_USAGE)  # read before the cut
    assert not snap.has(names.TTFT)  # the cut histogram is skipped, not half read
    (w,) = [w for w in snap.warnings if w.family == names.TTFT]
    assert w.line == _lineno(text, cut_at) and "+Inf" in w.reason
    # cut in the middle of a line: that line is skipped too, and named
    snap = m.parse_page(text[: i + 30], t=0)
    assert snap.has(names.NUM_RUNNING)
    assert any("newline" in w.reason for w in snap.warnings)


def test_a_hand_elided_line_is_skipped_and_named() -> None:
    text = page("cpu-0.32-preempt_mns16-during.prom")
    i = text.index("vllm:num_requests_running{")
    j = text.index("\n", i)
    elided = text[:i] + 'vllm:num_requests_running{...,reason="capacity"} 3' + text[j:]
    snap = m.parse_page(elided, t=0)
    assert snap.total(names.NUM_RUNNING) is None  # unknown, not zero
    assert snap.total(names.NUM_WAITING) is not None and snap.histogram(names.TTFT) is not None
    (w,) = snap.warnings
    assert w.line == _lineno(text, "vllm:num_requests_running{") and w.family == names.NUM_RUNNING
    assert f"line {w.line}: {names.NUM_RUNNING}: unreadable sample line" in str(w)


def test_a_comment_whose_quoted_name_never_closes_is_skipped_and_named() -> None:
    """Found by the mutation test beside a CPU hog (a random example): '# TYPE "process_open_fds
    gauge' raised prometheus_client's ValueError out of the parser; the reference refuses it."""
    text = page("cpu-0.32-preempt_mns16-during.prom")
    for head in ("# TYPE ", "# HELP "):
        i = text.index(head + "vllm:num_requests_running ")
        broken = text[: i + len(head)] + '"' + text[i + len(head) :]
        for strict in (True, False):
            snap = m.parse_page(broken, t=0, strict=strict)
            assert snap.total(names.NUM_WAITING) is not None and snap.histogram(names.TTFT) is not None
            assert [w.reason for w in snap.warnings] == [f"unterminated quoted name in {head.strip()}"]
            assert snap.warnings[0].line == _lineno(text, head + "vllm:num_requests_running ")


def test_a_histogram_without_its_type_line_is_one_histogram() -> None:
    text = (
        'vllm:time_to_first_token_seconds_bucket{model="m",le="0.1"} 1\n'
        'vllm:time_to_first_token_seconds_bucket{model="m",le="1.0"} 3\n'
        'vllm:time_to_first_token_seconds_bucket{model="m",le="+Inf"} 4\n'
        'vllm:time_to_first_token_seconds_count{model="m"} 4\n'
        'vllm:time_to_first_token_seconds_sum{model="m"} 2.5\n'
        'vllm:num_requests_running{model="m"} 2\n'
    )
    snap = m.parse_page(text, t=0)
    assert snap.families[names.TTFT].type == "histogram"
    assert not any(n.startswith(names.TTFT + "_") for n in snap.families)
    h = snap.histogram(names.TTFT, {"model_name": "m"})  # Triton's `model` label read as model_name
    assert h == Hist(((0.1, 1.0), (1.0, 3.0), (math.inf, 4.0)), 4.0, 2.5)
    assert m.model_names(snap) == ["m"] and snap.warnings == ()


@pytest.mark.parametrize(
    ("bad", "reason", "reference_refuses"),
    [
        (
            'vllm:time_to_first_token_seconds_bucket{engine="0",le="abc",model_name="x"} 1',
            "not a number",
            False,
        ),
        ('vllm:num_requests_waiting{engine="0",model_name="x"} ' + "9" * 400, "out of range", True),
        ('vllm:num_preemptions_total{engine="0",model_name="x"} NaN', "NaN", False),
        ('vllm:time_to_first_token_seconds_count{engine="0",model_name="x"} NaN', "NaN", False),
        ('vllm:num_requests_running{engine="0",model_name="x"} 1,5', "unreadable", True),
    ],
)
def test_one_bad_sample_is_skipped_counted_and_the_rest_read(
    bad: str, reason: str, reference_refuses: bool
) -> None:
    """Issue 17 #2: one unparsable sample never takes the page (or the daemon) down."""
    text = page("cpu-0.32-preempt_mns16-during.prom")
    family = bad.split("{")[0].removesuffix("_total").removesuffix("_count").removesuffix("_bucket")
    # insert the bad sample inside its own family's block, where a server would print it
    anchor = text.index("\n", text.index(bad.split("{")[0] + "{")) + 1
    snap = m.parse_page(text[:anchor] + bad + "\n" + text[anchor:], t=0)
    assert len(snap.warnings) == 1 and reason in snap.warnings[0].reason
    assert snap.warnings[0].line == text[:anchor].count("\n") + 1
    assert family in (snap.warnings[0].family or "")
    for fam in (names.NUM_RUNNING, names.NUM_WAITING, names.NUM_PREEMPTIONS, names.TTFT):
        assert snap.has(fam), fam
    if reference_refuses:  # prometheus_client alone refuses the whole page
        with pytest.raises(m.MetricsError):
            m.parse_page_reference(text[:anchor] + bad + "\n" + text[anchor:], t=0)


def test_what_is_not_prometheus_text_is_still_refused() -> None:
    for text in ("", "<html>x</html>\n", '{"a": 1}\n', "hello world\nthis is a log\n", "\x00\x01\xff\n"):
        with pytest.raises(m.MetricsError) as e:
            m.parse_page(text, t=0)
        assert e.value.kind == "not_prometheus"


def test_the_advisor_counts_a_page_with_a_bad_sample_and_stays_up() -> None:
    """What the daemon exports for issue 17 #2: `vllm_advisor_scrapes_total{result="bad_sample"}`
    (the page was read, parts skipped), `up` stays 1, and the next clean page is a success."""
    from prometheus_client.exposition import generate_latest as latest

    text = page("cpu-0.32-preempt_mns16-during.prom")
    anchor = text.index("\n", text.index("vllm:time_to_first_token_seconds_bucket{")) + 1
    bad = text[:anchor] + 'vllm:time_to_first_token_seconds_bucket{engine="0",le="abc"} 1\n' + text[anchor:]
    clock = ReplayClock(100.0)
    adv = Advisor(Config(), load_rules(), clock=clock)
    assert adv.on_page(bad, 100.0) and adv.up
    assert [w.family for w in adv.last_page_warnings] == [names.TTFT]
    assert adv.on_page(text, 105.0) and adv.last_page_warnings == ()
    assert adv.stats.scrapes == {"bad_sample": 1, "success": 1} and adv.stats.page_warnings == 1
    st = ExportState(adv.diagnose(105.0), adv.up, (), dict(adv.stats.scrapes))
    body = latest(make_registry(lambda: st)).decode()
    assert 'vllm_advisor_scrapes_total{result="bad_sample"} 1.0' in body


UTF8_PAGES = [(n, t) for n, t, _ in (FIXTURE_PAGES[0], FIXTURE_PAGES[len(PAGES_LIST) - 1], FIXTURE_PAGES[-1])]


@pytest.mark.parametrize(("name", "text"), UTF8_PAGES, ids=[n for n, _ in UTF8_PAGES])
def test_prometheus_3_quoted_names_are_read_like_the_classic_spelling(
    name: str, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34, G18: a page in Prometheus 3's UTF-8 exposition (``{"vllm:x",a="b"} 1``, quoted
    names in ``# HELP``/``# TYPE``) reads as the reference reads it, and as the classic spelling
    of the same page does: the same families, series and values, nothing skipped that the
    classic page keeps (before: every quoted line dropped silently, "no vLLM metrics on the
    page"). The fast path reads them itself: no quoted sample line goes to the reference
    grammar (the reference parser's calls are counted, not replaced)."""
    quoted = as_utf8(text)
    assert '{"vllm:num_requests_running"' in quoted
    calls = [0]
    real = promtext._reference_sample

    def counted(line: str) -> Any:
        calls[0] += 1
        return real(line)

    monkeypatch.setattr(promtext, "_reference_sample", counted)
    promtext._HEAD_CACHE.clear()
    snap = same_as_reference(quoted)
    assert calls[0] == 0
    plain = m.parse_page(text, 1.0)
    assert norm(snap) == norm(plain)
    assert snap.skipped == plain.skipped


def test_a_quoted_name_the_advisor_does_not_read_is_counted_as_skipped() -> None:
    """G18: a UTF-8 name no vLLM release writes (``vllm:foo.bar``, a dot in it) is never dropped
    silently: it is counted with the families not read (``vllm_advisor_page_samples_skipped
    {reason="not_read"}``), beside a quoted family that is read, with quoted label names too."""
    text = (
        '# HELP "vllm:num_requests_running" Number of requests in model execution batches.\n'
        '# TYPE "vllm:num_requests_running" gauge\n'
        '{"vllm:num_requests_running","model_name"="m",engine="0"} 3.0\n'
        '# TYPE "vllm:foo.bar" gauge\n'
        '{"vllm:foo.bar",label="x"} 1\n'
        '{"vllm:foo.bar",label="y"} 2\n'
    )
    snap = m.parse_page(text, 1.0)
    assert snap.families[names.NUM_RUNNING].series == {(("engine", "0"), ("model_name", "m")): 3.0}
    assert snap.skipped.get("not_read") == 2
    assert snap.warnings == ()
