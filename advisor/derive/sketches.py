"""Latency by request length from the stat-logger plugin's sketches, when the page carries them.

The plugin (advisor/plugin, docs/plugin.md) exports, per prompt-length and output-length bucket,
DDSketch quantiles over its own sliding window (``window_seconds``, default 60 s, in rotating
slots: a page's quantiles cover the requests that finished in the last ``window - window/slots``
to ``window`` seconds) and cumulative ``_count``/``_sum``. From the window's frames:

- the count and the mean over any evaluation window are exact (differences of the running sums);
- a quantile is the latest page's, over the plugin's own window: exact within the sketch's
  relative accuracy (1%). That is what the signals and ``explain`` show (quantiles of
  different windows do not combine into the quantile of their union). For comparisons over a
  longer window (live experiments: ``max_batches=None``), the pages at the window's end and
  every ``window_seconds`` before it hold disjoint sets of requests (*batches*), and the
  estimate is their quantiles averaged with each batch's request count as its weight: the
  typical quantile of a plugin window under a steady load, with an interval from all of them.

A batch is used when its page lies at least half a plugin window after the evaluation window's
start (so a 100-s window holds two: the last 60 s, and the 40 s before with some requests from
before the window in its sketch). Its request count is the ``_count`` increase, seen between
pages, over the part of its span that the sketch surely covers (``window - window/slots``
seconds) and that lies inside the evaluation window: a lower bound, so the intervals built on
it (verify.samples.SketchSample) err wide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from advisor.core import names as n
from advisor.core.model import Snapshot
from advisor.derive.window import COUNT_SUFFIX, SUM_SUFFIX, Window
from advisor.plugin import names as pn

SOURCE_PLUGIN = "plugin sketch"
SOURCE_HISTOGRAM = "vLLM histogram"

QUANTITIES: Mapping[str, str] = {
    "ttft": pn.REQUEST_TTFT,
    "tpot": pn.REQUEST_TPOT,
    "itl": pn.ITL,
    "e2e": pn.REQUEST_E2E,
    "queue": pn.REQUEST_QUEUE,
    "prefill": pn.REQUEST_PREFILL,
}
"""Quantity -> the plugin's summary. ITL is not split by length (vLLM reports it per step
without the request); the others are per prompt and per output bucket."""
BY_LENGTH = ("ttft", "tpot", "e2e", "queue", "prefill")
HISTOGRAMS: Mapping[str, str] = {
    "ttft": n.TTFT,
    "tpot": n.TPOT,
    "itl": n.ITL,
    "e2e": n.E2E,
    "queue": n.QUEUE_TIME,
    "prefill": n.PREFILL_TIME,
    "decode": n.DECODE_TIME,
}
"""Quantity -> vLLM's own histogram of it (coarse buckets, every length mixed)."""


def page_sources(page: Snapshot) -> dict[str, str | None]:
    """Per latency quantity, where the advisor reads its quantiles on this page: the plugin's
    sketch when the page carries its summary, else vLLM's histogram, else None (absent)."""
    out: dict[str, str | None] = {}
    for qty, hist in HISTOGRAMS.items():
        plug = QUANTITIES.get(qty)
        if plug is not None and plug in page.families:
            out[qty] = SOURCE_PLUGIN
        elif hist in page.families:
            out[qty] = SOURCE_HISTOGRAM
        else:
            out[qty] = None
    return out


DEFAULT_WINDOW_S = 60.0
DEFAULT_SLOTS = 6
DEFAULT_ACCURACY = 0.01


@dataclass(frozen=True)
class PluginInfo:
    """What ``vllm_advisor_engine_plugin_info`` says: the plugin is loaded, and how it is set up."""

    version: str
    vllm_version: str
    export: str
    port: str
    window_seconds: float
    window_slots: int
    relative_accuracy: float
    prompt_buckets: str
    output_buckets: str

    @property
    def covered_seconds(self) -> float:
        """The span a page's quantiles surely cover (the window less one slot)."""
        return self.window_seconds * (1 - 1 / max(self.window_slots, 1))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "vllm_version": self.vllm_version,
            "export": self.export,
            "port": self.port or None,
            "window_seconds": self.window_seconds,
            "window_slots": self.window_slots,
            "relative_accuracy": self.relative_accuracy,
            "prompt_buckets": self.prompt_buckets,
            "output_buckets": self.output_buckets,
        }


def _num(x: Any, default: float) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return default
    return v if v > 0 and v == v else default


def plugin_info(window: Window) -> PluginInfo | None:
    """The plugin's identity from the last page, None when the page has no plugin series."""
    latest = window.latest
    return None if latest is None else plugin_info_of(latest)


def plugin_info_of(page: Snapshot) -> PluginInfo | None:
    """The plugin's identity on one page, None when it has no ``plugin_info`` series."""
    infos = page.info_labels(pn.PLUGIN_INFO)
    if not infos:
        return None
    d = infos[0]
    return PluginInfo(
        version=d.get("version", ""),
        vllm_version=d.get("vllm_version", ""),
        export=d.get("export", ""),
        port=d.get("port", ""),
        window_seconds=_num(d.get("window_seconds"), DEFAULT_WINDOW_S),
        window_slots=int(_num(d.get("window_slots"), DEFAULT_SLOTS)),
        relative_accuracy=_num(d.get("relative_accuracy"), DEFAULT_ACCURACY),
        prompt_buckets=d.get("prompt_buckets", ""),
        output_buckets=d.get("output_buckets", ""),
    )


@dataclass(frozen=True)
class Batch:
    """One page's quantiles: the requests of one plugin window. ``n``: how many of them at
    least (the count increase over the span the window surely covers)."""

    t: float
    n: float
    quantiles: Mapping[float, float]


@dataclass(frozen=True)
class SketchLatency:
    """One quantity of one length bucket over an evaluation window."""

    quantity: str
    prompt_bucket: str
    output_bucket: str
    count: float | None  # requests finished in the window (ITL: inter-token gaps), exact
    mean: float | None  # exact: the sum's increase over the count's
    batches: tuple[Batch, ...]  # newest first; disjoint plugin windows inside the evaluation window
    window_seconds: float
    relative_accuracy: float

    @property
    def n(self) -> float:
        """Requests the quantiles stand on (at least)."""
        return sum(b.n for b in self.batches)

    def quantile(self, q: float) -> float | None:
        """The batches' q-quantiles averaged with their request counts as weights (equal weights
        when no count is known); None when no batch has it."""
        pts = [(b.n, b.quantiles[q]) for b in self.batches if q in b.quantiles]
        if not pts:
            return None
        if len(pts) == 1:
            return pts[0][1]
        total = sum(w for w, _ in pts)
        if total <= 0:
            return sum(v for _, v in pts) / len(pts)
        return sum(w * v for w, v in pts) / total

    @property
    def levels(self) -> tuple[float, ...]:
        return tuple(sorted({q for b in self.batches for q in b.quantiles}))

    def to_json(self) -> dict[str, Any]:
        return {
            "quantity": self.quantity,
            "prompt_bucket": self.prompt_bucket,
            "output_bucket": self.output_bucket,
            "count": self.count,
            "mean": self.mean,
            "quantiles": {f"p{q * 100:g}": self.quantile(q) for q in self.levels},
            "n": self.n,
            "batches": len(self.batches),
            "window_seconds": self.window_seconds,
            "relative_accuracy": self.relative_accuracy,
            "source": SOURCE_PLUGIN,
        }


def _labels(quantity: str, prompt_bucket: str, output_bucket: str) -> dict[str, str]:
    if quantity == "itl":
        return {}
    return {pn.PROMPT_BUCKET_LABEL: prompt_bucket, pn.OUTPUT_BUCKET_LABEL: output_bucket}


def latency(
    window: Window,
    quantity: str,
    seconds: float | None = None,
    prompt_bucket: str = pn.ALL,
    output_bucket: str = pn.ALL,
    info: PluginInfo | None = None,
    max_batches: int | None = 1,
) -> SketchLatency | None:
    """``quantity`` (see QUANTITIES) of one bucket over the last ``seconds`` of the window (None:
    all of it): the count and mean over all of it; the quantiles of the latest plugin window
    in it (``max_batches`` 1, the default: exact) or of up to ``max_batches`` disjoint ones
    (None: as many as it holds). None without the plugin's series or any request in the window."""
    name = QUANTITIES[quantity]
    info = info or plugin_info(window)
    if info is None:
        return None
    times = window.times(seconds)
    if not times:
        return None
    t_start, t_end = times[0], times[-1]
    match = _labels(quantity, prompt_bucket, output_bucket)
    count = window.counter_between(name + COUNT_SUFFIX, t_start, t_end, match)
    total = window.counter_between(name + SUM_SUFFIX, t_start, t_end, match)
    mean = total / count if count and total is not None else None
    batches: list[Batch] = []
    covered = info.covered_seconds
    t = t_end
    while max_batches is None or len(batches) < max_batches:
        got = window.quantiles_at(name, match, t)
        if got is None or got[0] < t_start:
            break
        tb, qs = got
        if batches and tb - info.window_seconds / 2 < t_start:
            break  # an earlier batch must lie mostly inside the evaluation window
        if qs:
            lo = max(tb - covered, t_start)  # its requests inside the evaluation window
            got_n = window.counter_between(name + COUNT_SUFFIX, lo, tb, match) or 0.0
            batches.append(Batch(tb, max(got_n, 0.0), qs))
        t = tb - info.window_seconds
    if not batches and not count:
        return None
    return SketchLatency(
        quantity,
        prompt_bucket,
        output_bucket,
        count,
        mean,
        tuple(batches),
        info.window_seconds,
        info.relative_accuracy,
    )


def bucket_labels(window: Window, dimension: str) -> list[str]:
    """The bucket labels (``prompt`` or ``output``) on the window's pages, in length order,
    without ``all``."""
    latest = window.latest
    if latest is None:
        return []
    label = pn.PROMPT_BUCKET_LABEL if dimension == "prompt" else pn.OUTPUT_BUCKET_LABEL
    fam = latest.families.get(pn.REQUEST_E2E + COUNT_SUFFIX)
    if fam is None:
        return []
    seen = {dict(k).get(label) for k in fam.series}
    return sorted((b for b in seen if b and b != pn.ALL), key=bucket_low)


def bucket_low(label: str) -> float:
    """The lowest length of a bucket label (``0-512`` -> 0, ``8193+`` -> 8193)."""
    head = label.rstrip("+").split("-")[0]
    try:
        return float(head)
    except ValueError:
        return float("inf")


def bucket_bounds(label: str) -> tuple[float | None, float | None]:
    """A bucket label's inclusive bounds in tokens: ``513-2048`` -> (513, 2048), ``8193+`` ->
    (8193, None)."""
    if label.endswith("+"):
        return bucket_low(label), None
    lo, _, hi = label.partition("-")
    try:
        return float(lo), float(hi)
    except ValueError:
        return None, None


@dataclass(frozen=True)
class BucketRow:
    dimension: str  # prompt | output | all
    bucket: str
    latencies: Mapping[str, SketchLatency]

    def to_json(self) -> dict[str, Any]:
        return {
            "dimension": self.dimension,
            "bucket": self.bucket,
            "latencies": {q: s.to_json() for q, s in self.latencies.items()},
        }


def by_bucket(
    window: Window, seconds: float | None = None, quantities: tuple[str, ...] = BY_LENGTH
) -> list[BucketRow]:
    """Every prompt bucket, every output bucket and all requests: the quantities of each over
    the last ``seconds``. Empty without the plugin's series."""
    info = plugin_info(window)
    if info is None:
        return []
    rows: list[BucketRow] = []
    cells = [("all", pn.ALL, pn.ALL)]
    cells += [("prompt", b, pn.ALL) for b in bucket_labels(window, "prompt")]
    cells += [("output", pn.ALL, b) for b in bucket_labels(window, "output")]
    for dim, pb, ob in cells:
        lat = {}
        for qty in quantities:
            s = latency(window, qty, seconds, pb, ob, info)
            if s is not None:
                lat[qty] = s
        if lat:
            rows.append(BucketRow(dim, pb if dim != "output" else ob, lat))
    return rows
