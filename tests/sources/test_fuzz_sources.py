"""Fuzzing (hypothesis) of the sources' parsers on mutated real inputs (issue 23): the metrics
page (every fixture page and a page of every recorded session, its readings made hostile), the
pasted launch command, the engine config YAML and the recorded session's files. Whatever the
input, only the project's own errors come out (MetricsError, CommandError, EngineSourceError,
SessionError), nothing hangs (bounded inputs, a deadline per example: tests/fuzzing.py), and no
value that is not a reading gets through: every number of a family the advisor reads is finite,
and a page with a non-finite value is never read as clean.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import shutil
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from advisor.core import jsonout, knobs, names
from advisor.core.config import Config
from advisor.core.model import BAD_SAMPLE_KINDS, Histogram
from advisor.diagnose.ruleset import load_rules
from advisor.drive.runner import Advisor
from advisor.sources import cmdline, engine, engine_config
from advisor.sources import metrics as m
from advisor.sources.session import Session, SessionError
from tests.fuzzing import fuzz, mutated, page_mutation
from tests.paths import FIXTURES

PAGE_FILES = sorted((FIXTURES / "pages").glob("*.prom")) + sorted(
    (FIXTURES / "paste" / "pages").glob("*.prom")
)
SESSION_DIRS = sorted((FIXTURES / "sessions").iterdir())
REAL_PAGES = [p.read_text() for p in PAGE_FILES] + [
    next(Session.load(d).iter_scrapes())[1] for d in SESSION_DIRS
]
RULES = load_rules()


def _check_snapshot(text: str, poisoned: bool) -> None:
    try:
        snap = m.parse_page(text, 1.0)
    except m.MetricsError as e:
        assert e.kind == "not_prometheus" and str(e)
        return
    for fam in snap.families.values():
        assert fam.name in m.READ_FAMILIES, fam.name  # nothing else is kept
        for v in fam.series.values():
            if isinstance(v, Histogram):
                assert all(math.isfinite(c) and c >= 0 for _, c in v.buckets) and math.isfinite(v.sum), (
                    fam.name
                )
                assert [c for _, c in v.buckets] == sorted(c for _, c in v.buckets), fam.name
            else:
                assert isinstance(v, float) and math.isfinite(v), (fam.name, v)
    assert all(w.kind in BAD_SAMPLE_KINDS and w.reason for w in snap.warnings)
    if poisoned:
        # the series is left out and named (as non_finite, out_of_range for 1e400, or for another
        # bad value of the same histogram series found first)
        assert snap.warnings, "a non-finite reading passed silently"


@fuzz(200)
@given(st.sampled_from(REAL_PAGES).flatmap(page_mutation))
def test_real_pages_with_hostile_readings(case: tuple[str, bool]) -> None:
    """Inputs: every fixture page and the first page of every recorded session, with 1-4 of:
    a reading of a read family replaced (NaN, +-Inf, negative, 1e19, 400 digits, 1e400), a
    series repeated with another value, a line deleted, a counter scaled, a histogram moved
    above its # HELP line, characters edited, the page cut."""
    _check_snapshot(*case)


# ------------------------------------------------------------------ the pasted launch command
COMMANDS = [p.read_text() for p in sorted((FIXTURES / "paste" / "commands").glob("*.sh"))]
COMMANDS += [(FIXTURES / "engine" / "h200-0.25-A_s256-serve_args.txt").read_text()]


@fuzz(200)
@given(st.one_of(mutated(COMMANDS, spaces=500), st.text(max_size=200)))
def test_pasted_commands_only_raise_command_errors(text: str) -> None:
    """Inputs: the pasted commands of tests/fixtures/paste/commands (docker run, NIM env, python
    -m, abbreviations) and a recorded `vllm serve` line, mutated; and arbitrary text."""
    try:
        cmd = cmdline.read_command(text)
    except cmdline.CommandError as e:
        assert str(e) and "Traceback" not in str(e)
        return
    assert all(isinstance(a, str) for a in cmd.argv) and all(isinstance(w, str) for w in cmd.warnings)
    for k, p in cmd.facts().items():
        assert isinstance(k, str) and p.source
    json.dumps([cmd.argv, cmd.launcher, cmd.warnings])


# ------------------------------------------------------------------ the engine config YAML
yaml_values = st.recursive(
    st.none()
    | st.booleans()
    | st.floats()
    | st.integers(-(10**30), 10**30)
    | st.text(max_size=20)
    | st.sampled_from(["1e400", "9" * 400, ".nan", "-.inf", "16K", "0.9", "auto"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
KNOB_KEYS = st.sampled_from(
    [*knobs.KNOBS, "max-num-seqs", "gpu-memory-utilization", "tensor-parallel-size", "model", "api-key"]
)
ENGINE_SEED = yaml.safe_dump(
    {"model": "/models/x", "max-num-seqs": 256, "gpu-memory-utilization": 0.9, "tensor-parallel-size": 2}
)


@fuzz(200)
@given(
    st.one_of(
        st.dictionaries(KNOB_KEYS, yaml_values, max_size=5).map(lambda d: yaml.safe_dump(d)),
        mutated([ENGINE_SEED]),
        st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    )
)
def test_engine_config_only_raises_engine_source_errors(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    """Inputs: mappings of knob names (both spellings) to arbitrary YAML values (wrong types,
    400-digit numbers, sizes like 16K, NaN), a real-shaped config mutated, arbitrary bytes."""
    p = tmp_path_factory.mktemp("eng") / "engine.yaml"
    p.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        values = engine_config.from_config_file(p)
    except engine_config.EngineSourceError as e:
        assert str(e) and "\n" not in str(e).strip()
        return
    for k, v in values.items():
        assert isinstance(k, str) and v.source == "config"
        json.dumps(v.value, default=str)  # plain values


# ------------------------------------------------------------------ recorded session files
META = json.loads((SESSION_DIRS[0] / "meta.json").read_text())
json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@st.composite
def session_edits(draw: Any) -> dict[str, Any]:
    meta = dict(META)
    for key in draw(
        st.lists(st.sampled_from([*sorted(meta), "log_marks", "started_at", "interval_s"]), max_size=4)
    ):
        if draw(st.booleans()):
            meta.pop(key, None)
        else:
            meta[key] = draw(json_values)
    return {
        "meta": draw(st.one_of(st.just(json.dumps(meta)), mutated([json.dumps(META)]), st.text(max_size=50))),
        "engine": draw(st.one_of(st.none(), mutated([(SESSION_DIRS[0] / "engine.json").read_text()]))),
        "page": draw(
            st.one_of(st.none(), st.sampled_from(REAL_PAGES[:4]).flatmap(page_mutation).map(lambda c: c[0]))
        ),
        "rename": draw(st.booleans()),
    }


@fuzz(40)
@given(session_edits())
def test_session_files_only_raise_session_errors(
    tmp_path_factory: pytest.TempPathFactory, edits: dict[str, Any]
) -> None:
    """Inputs: a copy of a recorded session (cpu-healthy) with meta.json replaced by the real one
    with fields dropped or set to arbitrary JSON, or mutated text; engine.json mutated; its first
    page replaced by a hostile page (see above); a page file misnamed."""
    d = tmp_path_factory.mktemp("session") / "s"
    shutil.copytree(SESSION_DIRS[0], d)
    (d / "meta.json").write_text(edits["meta"], encoding="utf-8", errors="surrogatepass")
    if edits["engine"] is not None:
        (d / "engine.json").write_text(edits["engine"], encoding="utf-8", errors="surrogatepass")
    pages = sorted((d / "metrics").iterdir())
    if edits["page"] is not None:
        pages[0].unlink()
        (d / "metrics" / pages[0].name.removesuffix(".gz")).write_text(edits["page"])
    if edits["rename"]:
        pages[-1].rename(pages[-1].with_name("x" + pages[-1].name))
    try:
        s = Session.load(d)
        for item in itertools.islice(s.replay(), 12):
            assert item.kind in ("scrape", "log")
    except SessionError as e:
        assert str(d) in str(e) or "session" in str(e).lower(), str(e)


# ------------------------------------------------------------------ cache_config_info labels
CACHE_PAGES = [t for t in REAL_PAGES if "vllm:cache_config_info{" in t]
CACHE_LABEL = re.compile(r"(vllm:cache_config_info\{)([^\n]*)(\}[^\n]*)")
LABEL_VALUES = st.one_of(
    st.sampled_from(
        [
            "N/A",
            "1e308",
            "-1",
            "nan",
            "NaN",
            "inf",
            "-inf",
            "9" * 400,
            "",
            "None",
            "True",
            "-0",
            "1e-400",
            "128.5",
            "7",
            "0",
            "1e18",
            "1e19",
            "0x10",
            "1_000",
            " 128 ",
            "\uff11\uff12\uff18",
            "\u0661\u0662",
            "auto",
            "fp8",
            'a"b',
            "a\\b",
            "a\nb",
            "\u202e",
            "\x1b[31m",
        ]
    ),
    st.integers(-(10**20), 10**20).map(str),
    st.floats().map(repr),
    st.text(max_size=20),
)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def cache_label_pages(draw: Any) -> str:
    """A real page whose cache_config_info labels (1-5 of them; the engine reads ten) are given
    arbitrary values."""
    page = draw(st.sampled_from(CACHE_PAGES))
    edits = draw(
        st.dictionaries(
            st.sampled_from([*engine._CACHE_LABELS, "engine"]), LABEL_VALUES, min_size=1, max_size=5
        )
    )

    def edit(mt: re.Match[str]) -> str:
        labels = mt.group(2)
        for name, value in edits.items():
            new = f'{name}="{_escape(value)}"'
            labels, n = re.subn(rf'(?<![\w]){name}="(?:[^"\\]|\\.)*"', lambda _m, new=new: new, labels)
            if not n:
                labels = f"{labels},{new}" if labels else new
        return mt.group(1) + labels + mt.group(3)

    return CACHE_LABEL.sub(edit, page)


def _check_facts(facts: Any) -> None:
    for key, p in facts.items():
        v = p.value
        if isinstance(v, bool) or not isinstance(v, int | float):
            json.dumps(v)
            continue
        assert math.isfinite(v) and 0 <= v <= engine.MAX_LABEL_NUMBER, (key, v)
        if key in knobs.KNOBS:
            k = knobs.KNOBS[key]
            assert (k.min is None or v >= k.min) and (k.max is None or v <= k.max), (key, v)
        if key in engine._INT_FACTS:
            assert isinstance(v, int), (key, v)


@fuzz(100)
@given(cache_label_pages())
def test_cache_config_info_labels_never_raise_and_read_finite(text: str) -> None:
    """Inputs: every fixture page and recorded first page with a `vllm:cache_config_info`, its
    labels (block_size, gpu_memory_utilization, num_gpu_blocks, kv_cache_size_tokens,
    kv_cache_max_concurrency, ... and engine) set to N/A, 1e308, -1, nan, 400 digits, 1e-400,
    full-width digits, empty, quotes and newlines, arbitrary text and numbers. Every fact read
    is finite and within its knob's bounds (0 to 1e18 otherwise) or unknown, the merged engine
    facts too, and the page is diagnosed (two pages of it, as a daemon's first two scrapes)."""
    snap = m.parse_page(text, 1000.0)
    assert snap.info_labels(names.CACHE_CONFIG_INFO), "the mutated page lost its cache_config_info"
    _check_facts(engine.from_snapshot(snap))
    _check_facts(engine.resolve(snapshot=snap).values)
    for raw in snap.info_labels(names.CACHE_CONFIG_INFO)[0].values():
        got = engine.label_number(raw)
        assert got is None or (math.isfinite(got) and 0 <= got <= engine.MAX_LABEL_NUMBER)
    t = [1000.0]
    adv = Advisor(Config(), RULES, clock=lambda: t[0])
    adv.on_page(text, t[0])
    t[0] += 5.0
    adv.on_page(text, t[0])
    d = adv.diagnose(t[0])
    _check_facts(adv.engine.values)
    jsonout.dumps(d, default=str).encode("utf-8", "surrogatepass")
