"""Fuzzing (hypothesis) of what a Prometheus answers (issue 34): the JSON bodies of
``/api/v1/query`` (range vectors and the sidecar's instant vector), ``/api/v1/series``,
``/api/v1/label/__name__/values`` and ``/api/v1/metadata`` that advisor/sources/prometheus.py
reads, for ``explain --prometheus`` (:func:`prometheus.read_history` then
:func:`inputs.from_prometheus`) and the fleet daemon's discovery and names (its cycle reads the
rest through the same ``Client.raw``, ``Client.instant``, ``snapshots`` and ``sidecar_readings``).
``/api/v1/query_range`` is not read by the advisor (the module's docstring says why).

Seeds are real-shaped answers: what the stand-in (tests/prom_standin.py) answers from the samples
a Prometheus stores for a recorded real session, with a sidecar's knob, fact and info series.
They are mutated as JSON: values replaced by "NaN", "+Inf", "1e400", 400 digits, non-strings;
timestamps that go back, are not numbers or are 400-digit integers; keys dropped or given the
wrong type; huge label values, lone surrogates and control characters; series repeated; or the
body's text edited. The Prometheus is the stand-in: a real one cannot be made to answer these.

Properties: only :class:`PrometheusError` escapes the read (one line, a documented kind); every
read family of a page is finite once checked (``metrics.checked``, as ``Advisor.on_snapshot`` does) and a
page with a non-finite reading always carries a warning; every knob or fact the sidecar gave is
finite; the diagnosis runs, writes as JSON and counts a bad sample when one was fed.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from advisor.core import jsonout
from advisor.core.config import Config
from advisor.core.model import BAD_SAMPLE_KINDS, Histogram, Snapshot
from advisor.diagnose.ruleset import load_rules
from advisor.drive import inputs
from advisor.sources import metrics as m
from advisor.sources import prometheus as prom
from tests import prom_standin
from tests.fuzzing import fuzz, mutated
from tests.paths import FIXTURES

INSTANCE = "a.fleet:8000"
SIDECAR = "a.fleet:9100"
WINDOW_S = 20.0
KINDS = {"refused", "timeout", "too_large", "too_many", "http", "bad_response", "query", "no_data"}
RULES = load_rules()
DISCOVERY = prom.selector(f"__name__=~{prom.quote('|'.join(prom.DISCOVERY_NAMES))}", 'job="vllm"')
NAMES = prom.selector(f"__name__=~{prom.quote(prom.READ_NAME_RE)}", 'job="vllm"')


def _samples() -> tuple[list[prom_standin.Sample], dict[str, Any], float]:
    samples, meta = prom_standin.stored_samples(FIXTURES / "sessions" / "cpu-preempt-nobind", INSTANCE)
    times = sorted({t for _, vals in samples for t, _ in vals})
    side = {"instance": SIDECAR, "job": "advisor", "source": "cmdline"}
    for labels, v in [
        ({"__name__": prom.SIDECAR_KNOB, "knob": "max_num_seqs"}, 256.0),
        ({"__name__": prom.SIDECAR_KNOB, "knob": "gpu_memory_utilization"}, 0.9),
        ({"__name__": prom.SIDECAR_FACT, "fact": "gpu_memory_bytes"}, 80.0 * 2**30),
        ({"__name__": prom.SIDECAR_INFO, "version": "0.32.0", "model": "m", "device": "cpu"}, 1.0),
    ]:
        samples.append(({**labels, **side}, [(t, v) for t in times]))
    up = {"__name__": "up", "instance": INSTANCE, "job": "vllm"}
    samples.append((up, [(t, 0.0 if i == 3 else 1.0) for i, t in enumerate(times)]))
    return samples, meta, times[-1]


SAMPLES, META, END = _samples()
AT = END + 1.0


@pytest.fixture(scope="module")
def standin() -> Iterator[tuple[str, prom_standin.Behaviour, dict[str, bytes], dict[str, bytes]]]:
    """The stand-in, and the real answers it gives to ``explain --prometheus``'s read and to one
    fleet cycle (by request: :func:`prom_standin.answer_key`)."""
    behaviour = prom_standin.Behaviour("normal")
    with prom_standin.serve(SAMPLES, META, behaviour) as url:
        _read(prom.Client(url))
        yield url, behaviour, dict(behaviour.answered)


def _read(client: prom.Client) -> tuple[prom.History, list[dict[str, str]], list[str]]:
    """What `explain --prometheus` reads, and the discovery and the names a fleet's cycle asks
    first (the fleet then reads its pages through the same `raw`, `instant` and `snapshots`)."""
    found = client.series([DISCOVERY], AT - 60.0, AT)
    names = client.label_values("__name__", [NAMES], AT - WINDOW_S, AT)
    return prom.read_history(client, INSTANCE, AT, WINDOW_S), found, names


# ------------------------------------------------------------------ mutations of one answer
HOSTILE_VALUES = st.sampled_from(
    ["NaN", "+Inf", "-Inf", "1e400", "9" * 400, "-1", "1e19", "", "abc", "0x10", " 1", "1_0"]
) | st.sampled_from([7, 1.5, None, True, [], {}, "Infinity", "nan"])
HOSTILE_TIMES = st.sampled_from(
    [-1, 0, 1e308, 10**400, -(10**30), "123", None, True, [], 1e-300, float("nan"), float("inf")]
)
HOSTILE_LABELS = st.one_of(
    st.sampled_from(["", "x" * 20_000, "\ud800", "\udc80x", "a\nb", "\x1b[31mred", "\u202e", "{}", '"']),
    st.text(max_size=30),
    st.sampled_from([None, 7, [], {}, True]),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def _series_list(doc: Any) -> list[Any] | None:
    data = doc.get("data") if isinstance(doc, dict) else None
    if isinstance(data, dict) and isinstance(data.get("result"), list):
        return data["result"]
    return data if isinstance(data, list) else None


@st.composite
def mutate_doc(draw: Any, doc: Any) -> Any:
    """One real answer with 1-4 edits (see the module's docstring)."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 4))):
        series = _series_list(doc)
        op = draw(
            st.sampled_from(["value", "value", "time", "back", "dup", "label", "drop", "type", "top", "many"])
        )
        if op == "top" or not series:
            key = draw(st.sampled_from(["status", "data", "warnings", "errorType", "resultType"]))
            target = doc if key != "resultType" or not isinstance(doc.get("data"), dict) else doc["data"]
            if draw(st.booleans()):
                target.pop(key, None)
            else:
                target[key] = draw(JSON_VALUES | st.sampled_from(["success", "error", "vector", "matrix"]))
            continue
        i = draw(st.integers(0, len(series) - 1))
        item = series[i]
        if op == "dup":
            series.insert(draw(st.integers(0, len(series))), copy.deepcopy(item))
            continue
        if op == "many":  # a series repeated many times (huge but bounded answers)
            series.extend(copy.deepcopy(item) for _ in range(draw(st.integers(1, 20))))
            continue
        if not isinstance(item, dict):
            series[i] = draw(JSON_VALUES)
            continue
        labels = item.get("metric", item)
        pairs = item.get("values") if isinstance(item.get("values"), list) else None
        one = item.get("value") if isinstance(item.get("value"), list) else None
        if op in ("value", "time", "back") and (pairs or one):
            pair = draw(st.sampled_from(pairs)) if pairs else one
            if not isinstance(pair, list) or len(pair) != 2:
                continue
            if op == "value":
                pair[1] = draw(HOSTILE_VALUES)
            elif op == "time":
                pair[0] = draw(HOSTILE_TIMES)
            elif isinstance(pair[0], int | float):  # the clock went back, or a series out of order
                if pairs and draw(st.booleans()):
                    pairs.reverse()
                else:
                    pair[0] = pair[0] - draw(st.sampled_from([1, 15, 3600, 1e6]))
        elif op == "label" and isinstance(labels, dict) and labels:
            name = draw(st.sampled_from([*sorted(labels), "le", "model_name", "engine", "vllm_instance"]))
            labels[name] = draw(HOSTILE_LABELS)
        elif op == "drop":
            key = draw(st.sampled_from(["metric", "values", "value", "__name__", "instance", "le"]))
            item.pop(key, None)
            if isinstance(labels, dict):
                labels.pop(key, None)
        elif op == "type":
            key = draw(st.sampled_from(["metric", "values", "value"]))
            item[key] = draw(JSON_VALUES)
    return doc


@st.composite
def hostile_answers(draw: Any, real: dict[str, bytes]) -> dict[str, bytes]:
    """1-3 of the real answers replaced: mutated as JSON, or their text edited."""
    keys = draw(st.lists(st.sampled_from(sorted(real)), min_size=1, max_size=3, unique=True))
    out = {}
    for k in keys:
        if draw(st.integers(0, 9)) == 0:
            text = draw(mutated([real[k].decode()[:4000]], spaces=50))
            out[k] = text.encode("utf-8", "surrogatepass")
        else:
            doc = draw(mutate_doc(json.loads(real[k])))
            out[k] = json.dumps(doc).encode()  # NaN and lone surrogates as Python writes them
    return out


# ------------------------------------------------------------------ checks
def _values(snap: Snapshot) -> Iterator[tuple[str, float]]:
    """(family, number) of every family the advisor reads (``metrics.READ_FAMILIES``: the others
    are kept as Prometheus gave them and read by nothing, as ``promtext.check_families`` says)."""
    for fam in snap.families.values():
        if fam.name not in m.READ_FAMILIES:
            continue
        for v in fam.series.values():
            if isinstance(v, Histogram):
                yield from ((fam.name, x) for x in (v.count, v.sum, *(c for _, c in v.buckets)))
            elif isinstance(v, float | int):
                yield fam.name, float(v)


def _check_error(e: prom.PrometheusError) -> None:
    assert e.kind in KINDS, e.kind
    assert str(e) and "\n" not in str(e) and "Traceback" not in str(e), str(e)
    str(e).encode("utf-8")  # printable as an `error:` line


def _check_engine(engine: Any) -> None:
    for k, p in engine.items():
        if isinstance(p.value, float | int) and not isinstance(p.value, bool):
            assert math.isfinite(p.value) and 0 <= p.value <= prom.MAX_READING, (k, p.value)


def _check_pages(snaps: Any) -> bool:
    """Every page checked is finite; a page with a non-finite reading is named. True when one was."""
    poisoned = False
    last = None
    for s in snaps:
        assert isinstance(s.t, float) and math.isfinite(s.t), s.t
        assert last is None or s.t > last, (last, s.t)  # pages in time order, one per time
        last = s.t
        bad = any(not math.isfinite(v) for _, v in _values(s))
        c = m.checked(s)
        left = [(name, v) for name, v in _values(c) if not math.isfinite(v)]
        assert not left, left[:3]
        for fam in c.families.values():
            for v in fam.series.values() if fam.name in m.READ_FAMILIES else ():
                if isinstance(v, Histogram):
                    assert [n for _, n in v.buckets] == sorted(n for _, n in v.buckets), fam.name
        assert all(w.kind in BAD_SAMPLE_KINDS and w.reason for w in c.warnings)
        if bad:
            assert c.warnings, "a non-finite reading from Prometheus passed silently"
            poisoned = True
    return poisoned


@fuzz(100)
@given(data=st.data())
def test_explain_prometheus_reads_hostile_answers(standin: Any, data: Any) -> None:
    """Inputs: the answers to `explain --prometheus`'s read of a recorded real server (metadata,
    its raw samples, `up`, the sidecar's instant vector; the discovery series when no page is
    read), 1-3 of them mutated (see the module docstring)."""
    url, behaviour, real = standin
    behaviour.replies = data.draw(hostile_answers(real))
    try:
        history, found, names = _read(prom.Client(url, timeout_s=5.0))
    except prom.PrometheusError as e:
        _check_error(e)
        event(f"PrometheusError {e.kind}")
        return
    finally:
        behaviour.replies = {}
    assert all(isinstance(v, str) for d in found for v in d.values()) and all(
        isinstance(n, str) for n in names
    )
    _check_engine(history.engine)
    assert all(w.kind in BAD_SAMPLE_KINDS for w in history.bad_sidecar)
    assert all(math.isfinite(t) for t in history.down)
    poisoned = _check_pages(history.snapshots)
    event("read, a non-finite reading named" if poisoned else "read")
    adv, d = inputs.from_prometheus(history, Config(), RULES, AT, WINDOW_S)
    jsonout.dumps(d, default=str).encode("utf-8")
    if poisoned or history.bad_sidecar:
        assert adv.stats.bad_samples, "a bad sample was fed and not counted"
        assert d.status != "healthy", d.reason
