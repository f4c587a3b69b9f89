"""``vllm bench serve`` results as they reach the advisor: ``--save-result --save-detailed``
JSON files (gzip too), the printed result table, and the command line that produced them.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.predict.workload import meets
from advisor.verify.samples import ExperimentError

# --------------------------------------------------------------------------------------------
# Benchmark files
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestRow:
    """One request of a benchmark run; None where the file does not carry the field."""

    prompt_len: int | None
    output_len: int | None
    ttft_s: float | None
    tpot_s: float | None
    itls_s: tuple[float, ...] | None
    e2e_s: float | None
    ok: bool
    start_time: float | None = None


@dataclass(frozen=True)
class BenchRun:
    """A ``vllm bench serve`` result: per-request rows (may be empty) and run totals."""

    source: str
    rows: tuple[RequestRow, ...]
    duration_s: float | None
    completed: int | None
    failed: int | None
    output_throughput: float | None
    request_throughput: float | None
    max_concurrency: int | None
    request_rate: float | None
    num_prompts: int | None
    burstiness: float | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    model_id: str | None = None
    date: str | None = None
    dataset: Mapping[str, Any] = field(default_factory=dict)
    aggregates: Mapping[str, float] = field(default_factory=dict)

    @property
    def ok_rows(self) -> tuple[RequestRow, ...]:
        return tuple(r for r in self.rows if r.ok)

    def goodput(self, targets: Mapping[str, float]) -> float | None:
        """Output tokens/s of the requests that met every target, counted per request as
        ``vllm bench serve --goodput`` does (None without the run's duration)."""
        if not self.duration_s:
            return None
        good = sum(
            r.output_len or 0
            for r in self.ok_rows
            if r.ttft_s is not None and r.e2e_s is not None and meets(r.ttft_s, r.tpot_s, r.e2e_s, targets)
        )
        return good / self.duration_s


_DATASET_KEYS = (
    "dataset_name",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "random_prefix_len",
    "sharegpt_output_len",
    "seed",
    "ignore_eos",
)
AGG_METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}


def load_bench(path: str | Path, itls_path: str | Path | None = None) -> BenchRun:
    """Read a bench result (``.json`` or ``.json.gz``), or what users paste of one: the JSON
    with the command that was run above it, or the printed "Serving Benchmark Result" table
    (see :func:`read_bench_text`). When its per-request ``itls`` were moved out, a sibling
    ``itls_ms.json.gz`` (a list of per-request lists, in ms) is read instead."""
    p = Path(path)
    data = _read_bench_file(p)
    if not isinstance(data, dict):
        raise ExperimentError(f"{p}: not a vllm bench result (expected a JSON object)")
    itls_ms = None
    if "itls" not in data:
        side = Path(itls_path) if itls_path is not None else p.parent / "itls_ms.json.gz"
        if itls_path is not None or side.exists():
            itls_ms = _read_json(side, "ITL file")
    return parse_bench(data, source=str(p), itls_ms=itls_ms)


_TABLE_HEAD = "Serving Benchmark Result"
_TABLE_ROW_RE = re.compile(
    r"^\s*(?P<label>[A-Za-z][^:]*?):\s+(?P<value>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|inf|nan)\s*$"
)
_TABLE_METRIC_RE = re.compile(
    r"^(?P<stat>mean|median|std|p(?P<p>\d+(?:\.\d+)?)) (?P<m>ttft|tpot|itl|e2el) \(ms\)$"
)
_TABLE_KEYS = {
    "successful requests": "completed",
    "failed requests": "failed",
    "maximum request concurrency": "max_concurrency",
    "request rate configured (rps)": "request_rate",
    "benchmark duration (s)": "duration",
    "total input tokens": "total_input_tokens",
    "total generated tokens": "total_output_tokens",
    "request throughput (req/s)": "request_throughput",
    "request goodput (req/s)": "request_goodput",
    "output token throughput (tok/s)": "output_throughput",
    "peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "peak concurrent requests": "max_concurrent_requests",
    "total token throughput (tok/s)": "total_token_throughput",
    "input token throughput (tok/s)": "input_throughput",
}
# what a pasted command above a result says about the load and the model
_CMD_KEYS = {
    "--model": "model_id",
    "--num-prompts": "num_prompts",
    "--max-concurrency": "max_concurrency",
    "--request-rate": "request_rate",
    "--burstiness": "burstiness",
    "--dataset-name": "dataset_name",
    "--random-input-len": "random_input_len",
    "--random-output-len": "random_output_len",
}
_CMD_FLAG_RE = re.compile(r"(?<!\S)(--[a-z][a-z0-9_-]*)(?:=|\s+)(?!--)([^\s\\]+)")


def read_bench_text(text: str, source: str = "") -> dict[str, Any]:
    """A bench result as pasted (pure): JSON, JSON after other text (the command that was
    run: its --model and load flags are read), or ``vllm bench serve`` /
    ``benchmark_serving.py``'s printed "Serving Benchmark Result" table (counts, duration,
    throughputs, and every Mean/Median/Std/P<n> row of TTFT, TPOT, ITL and E2EL, as the keys
    ``--save-result`` writes). Raises ExperimentError when it is none of these."""
    src = source or "bench result"
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise ExperimentError(f"{src} is not valid JSON: {e}") from None
        except RecursionError:
            raise ExperimentError(f"{src} is not a bench result: JSON nested too deeply") from None
        if not isinstance(data, dict):
            raise ExperimentError(f"{src}: not a vllm bench result (expected a JSON object)")
        return data
    head = text.find(_TABLE_HEAD)
    brace = re.search(r"^\s*\{", text, re.MULTILINE)
    if brace is not None and (head < 0 or brace.start() < head):
        try:
            data, _ = json.JSONDecoder().raw_decode(text[brace.start() :].lstrip())
        except json.JSONDecodeError as e:
            raise ExperimentError(f"{src}: the JSON after the text above it is not valid: {e}") from None
        except RecursionError:
            raise ExperimentError(f"{src} is not a bench result: JSON nested too deeply") from None
        if not isinstance(data, dict):
            raise ExperimentError(f"{src}: not a vllm bench result (expected a JSON object)")
        return {**_from_command(text[: brace.start()]), **data}
    if head < 0:
        raise ExperimentError(
            f"{src}: not a vllm bench result: neither JSON nor a printed '{_TABLE_HEAD}' table"
        )
    data = _from_command(text[:head])
    for line in text[head:].splitlines()[1:]:
        if line.startswith("=" * 10):
            break  # the table's closing rule
        m = _TABLE_ROW_RE.match(line)
        if not m:
            continue
        label = " ".join(m["label"].lower().split())
        value = float(m["value"])
        mm = _TABLE_METRIC_RE.match(label)
        if mm:
            stat = f"p{mm['p']}" if mm["p"] else mm["stat"]
            data[f"{stat}_{mm['m']}_ms"] = value
        elif label in _TABLE_KEYS:
            data[_TABLE_KEYS[label]] = value
    if "completed" not in data:
        raise ExperimentError(f"{src}: a '{_TABLE_HEAD}' table without 'Successful requests:'")
    if "num_prompts" not in data:  # every prompt either completes or fails
        data["num_prompts"] = data["completed"] + data.get("failed", 0)
    data["_printed_table"] = True
    return data


def _from_command(text: str) -> dict[str, Any]:
    """The load and model flags of a ``vllm bench serve`` command pasted above a result."""
    out: dict[str, Any] = {}
    if "bench" not in text and "benchmark_serving" not in text:
        return out
    for flag, value in _CMD_FLAG_RE.findall(text):
        key = _CMD_KEYS.get(flag.replace("_", "-"))
        if key is None:
            continue
        if key in ("model_id", "dataset_name"):
            out[key] = value.strip("'\"")
        else:
            try:
                out[key] = float(value) if key in ("request_rate", "burstiness") else int(value)
            except ValueError:
                continue
    return out


def _read_bench_file(p: Path) -> dict[str, Any]:
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ExperimentError(f"benchmark result {p} does not exist") from None
    except OSError as e:
        raise ExperimentError(f"cannot read benchmark result {p}: {e.strerror or e}") from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ExperimentError(f"benchmark result {p} is not valid (gzipped) text: {e}") from None
    return read_bench_text(text, str(p))


def _read_json(p: Path, what: str) -> Any:
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ExperimentError(f"{what} {p} does not exist") from None
    except OSError as e:
        raise ExperimentError(f"cannot read {what} {p}: {e.strerror or e}") from None
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return json.loads(raw.decode("utf-8"))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExperimentError(f"{what} {p} is not valid (gzipped) JSON: {e}") from None
    except RecursionError:
        raise ExperimentError(f"{what} {p} is not a bench result: JSON nested too deeply") from None


# No count, length, time or throughput of a benchmark comes near this (ms: 31,000 years); a
# number beyond it (a 400-digit integer, 1e308) is refused where it is read, before arithmetic
# on it overflows (a standard error squared, an int that no float holds).
MAX_VALUE = 1e15


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} characters)"


def _num(v: Any, key: str, src: str, allow_inf: bool = False) -> float | None:
    """A number of the file, or None; out of range (or infinite, unless ``allow_inf``: the
    unlimited request rate vLLM writes as "inf") is an ExperimentError naming the field."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise ExperimentError(f"{src}: {key} is not a number: {_short(v)}")
    try:
        f = float(v)
    except OverflowError:
        f = math.inf
    except ValueError:
        raise ExperimentError(f"{src}: {key} is not a number: {_short(v)}") from None
    if math.isnan(f):
        return None  # unknown
    if abs(f) > MAX_VALUE and not (allow_inf and math.isinf(f) and str(v).strip().lower() in ("inf", "+inf")):
        raise ExperimentError(f"{src}: {key} is out of range: {_short(v)} (no benchmark value exceeds 1e15)")
    return f


def _itls(raw: list[Any], key: str, src: str, scale: float) -> tuple[float, ...]:
    """One request's ITLs in seconds (an unknown one as 0). The common case, plain finite
    numbers in range, is checked in one pass (a run's files hold ~10^5-10^6 of them); anything
    else goes number by number through :func:`_num`, which names what is wrong."""
    if all((type(x) is float or type(x) is int) and -MAX_VALUE <= x <= MAX_VALUE for x in raw):
        return tuple(x * scale for x in raw)
    return tuple(float(_num(x, key, src) or 0.0) * scale for x in raw)


def _int(v: Any, key: str, src: str) -> int | None:
    f = _num(v, key, src)
    return None if f is None or not math.isfinite(f) else int(f)


def parse_bench(data: Mapping[str, Any], source: str = "", itls_ms: Any = None) -> BenchRun:
    """Build a :class:`BenchRun` from a parsed bench result (pure). ``itls_ms``: per-request ITL
    lists in milliseconds, used when ``data`` has no ``itls`` (seconds)."""
    src = source or "bench result"
    if not any(k in data for k in ("completed", "duration", "num_prompts")):
        raise ExperimentError(f"{src}: not a vllm bench result (no completed/duration/num_prompts)")
    arrays: dict[str, list[Any]] = {}
    for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors"):
        v = data.get(key)
        if v is None:
            continue
        if not isinstance(v, list):
            raise ExperimentError(f"{src}: {key} is not a list")
        arrays[key] = v
    itl_scale = 1.0
    if "itls" not in arrays and itls_ms is not None:
        if not isinstance(itls_ms, list):
            raise ExperimentError(f"{src}: the ITL file is not a list of per-request lists")
        arrays["itls"], itl_scale = itls_ms, 1e-3
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ExperimentError(f"{src}: per-request arrays have different lengths: {lengths}")
    n = next(iter(lengths.values()), 0)
    rows = []
    for i in range(n):

        def get(key: str, i: int = i) -> Any:
            return arrays[key][i] if key in arrays else None

        itls: tuple[float, ...] | None = None
        raw_itl = get("itls")
        if raw_itl is not None:
            if not isinstance(raw_itl, list):
                raise ExperimentError(f"{src}: itls[{i}] is not a list")
            itls = _itls(raw_itl, f"itls[{i}]", src, itl_scale)
        ttft = _num(get("ttfts"), f"ttfts[{i}]", src)
        out_len = _int(get("output_lens"), f"output_lens[{i}]", src)
        e2e = _num(get("latencies"), f"latencies[{i}]", src)
        if e2e is None and ttft is not None and itls is not None:
            e2e = ttft + sum(itls)
        err = get("errors")
        ok = not err and (out_len is None or out_len > 0) and (ttft is None or ttft > 0)
        tpot = None
        if ok and e2e is not None and ttft is not None and out_len is not None and out_len > 1:
            tpot = (e2e - ttft) / (out_len - 1)
        rows.append(
            RequestRow(
                prompt_len=_int(get("input_lens"), f"input_lens[{i}]", src),
                output_len=out_len,
                ttft_s=ttft,
                tpot_s=tpot,
                itls_s=itls,
                e2e_s=e2e,
                ok=bool(ok),
                start_time=_num(get("start_times"), f"start_times[{i}]", src),
            )
        )
    rate = data.get("request_rate")
    aggregates: dict[str, float] = {}
    for k, v in data.items():
        if k.endswith("_ms") and isinstance(v, int | float) and not isinstance(v, bool):
            f = _num(v, k, src)
            if f is not None:
                aggregates[k] = f
    return BenchRun(
        source=src,
        rows=tuple(rows),
        duration_s=_num(data.get("duration"), "duration", src),
        completed=_int(data.get("completed"), "completed", src),
        failed=_int(data.get("failed"), "failed", src),
        output_throughput=_num(data.get("output_throughput"), "output_throughput", src),
        request_throughput=_num(data.get("request_throughput"), "request_throughput", src),
        max_concurrency=_int(data.get("max_concurrency"), "max_concurrency", src),
        request_rate=_num(rate, "request_rate", src, allow_inf=True),
        num_prompts=_int(data.get("num_prompts"), "num_prompts", src),
        burstiness=_num(data.get("burstiness"), "burstiness", src),
        total_input_tokens=_int(data.get("total_input_tokens"), "total_input_tokens", src),
        total_output_tokens=_int(data.get("total_output_tokens"), "total_output_tokens", src),
        model_id=str(data["model_id"]) if data.get("model_id") is not None else None,
        date=str(data["date"]) if data.get("date") is not None else None,
        dataset={k: data[k] for k in _DATASET_KEYS if k in data},
        aggregates=aggregates,
    )
