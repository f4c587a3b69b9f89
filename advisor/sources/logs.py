"""vLLM log reader: raw lines -> typed :class:`advisor.model.LogEvent` values.

Two layers, kept apart on purpose:

* **Pure parsing** (no I/O, no clock): :func:`parse_line` turns one logical line into one
  event; :class:`LineJoiner` / :func:`join_lines` rejoin lines that a terminal or
  ``kubectl logs`` hard-wrapped; :func:`parse_lines` does both; :class:`LogCounts` counts
  events by kind; :func:`collect_facts` folds startup facts into a dict.
* **Followers** (the I/O edge): :class:`FileFollower` (survives rotation, copytruncate,
  deletion and re-creation, and a file that does not exist yet), :class:`StreamFollower`
  (stdin or any pipe) and :class:`CommandFollower` (``journalctl -f``, ``docker logs -f``,
  ``kubectl logs -f``). Each yields raw ``str`` lines from ``.lines()`` and stops promptly on
  ``.close()`` (callable from another thread): every wait is bounded by ``poll_interval``.

Design choices worth knowing:

* One line gives one event. A line that carries several startup facts (``CPU KV cache size:
  3,072 tokens, Maximum concurrency for ...``, the engine-config line with its version)
  returns the first fact as ``fields['fact']``/``fields['value']`` and the rest in
  ``fields['also']`` as a list of ``{"fact": ..., "value": ...}`` dicts.
  :func:`event_facts` flattens both into ``[(fact, value), ...]``.
* Percentages become ratios (``GPU KV cache usage: 98.8%`` -> ``kv_cache_usage=0.988``);
  throughputs stay tokens/s; ``iteration`` elapsed time is in seconds.
* Timestamps: an outer RFC3339 timestamp (``docker logs --timestamps``, ``kubectl
  --timestamps``, CRI log files) wins because it carries the year and the zone; otherwise
  vLLM's ``MM-DD hh:mm:ss`` read as UTC, otherwise journald's ``Mon DD hh:mm:ss``. Those two
  carry no year: it is ``year`` when the caller knows it, else the year that puts the line
  nearest to ``near`` (a time the lines were written around: a recording's start; default
  now), so a December line read in January lands in December of the year before.
* Secrets: ``LogEvent.line`` is stored ANSI-free, capped at :data:`MAX_LINE_CHARS` and
  passed through :func:`advisor.redact.redact_text` (an ``unknown`` event keeps no text); parsed dicts go through :func:`advisor.redact.redact_obj`.
* Nothing here raises on bad input: unrecognised, binary or oversized lines become
  ``kind="unknown"`` events.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from advisor.core.model import EVENT_KINDS, LogEvent
from advisor.core.redact import redact_obj, redact_text
from advisor.sources.logdicts import lenient_dict, parse_kv_config, split_top
from advisor.sources.logprefix import MAX_LINE_CHARS, clean_line, strip_prefixes
from advisor.sources.logwrap import join_lines

__all__ = [
    "MAX_LINE_CHARS",
    "LogCounts",
    "collect_facts",
    "count_events",
    "event_facts",
    "parse_line",
    "parse_lines",
]


# --------------------------------------------------------------------------- recognisers

_STATS_MARK = "Avg prompt throughput"
_STATS_PART_RE = re.compile(
    r"^\s*(?P<key>[A-Za-z][A-Za-z /_-]*?)\s*:\s*(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)"
    r"\s*(?P<unit>%|[A-Za-z/]+)?\s*$"
)
_MAX_STATS_PART = 200
_MAX_STATS_BODY = 4096
_ENGINE_HEAD_RE = re.compile(r"\bEngine\s+(\d+)\s*:\s*")
_DEVICE_KV_RE = re.compile(r"^(?:(?P<dev>[A-Z]{2,4}) )?KV cache usage$")
_V0_PREFIX_HIT_RE = re.compile(r"^Prefix cache hit rate: GPU: (?P<gpu>[\d.]+)%, CPU: (?P<cpu>[\d.]+)%\.?\s*$")
_STATS_KEYS: dict[str, tuple[str, type]] = {
    "avg prompt throughput": ("prompt_throughput", float),
    "avg generation throughput": ("generation_throughput", float),
    "running": ("running", int),
    "waiting": ("waiting", int),
    "pending": ("waiting", int),
    "swapped": ("swapped", int),
    "deferred": ("deferred", int),
    "preemptions": ("preemptions", int),
    "corrupted": ("corrupted", int),
    "prefix cache hit rate": ("prefix_cache_hit_rate", float),
    "gpu prefix cache hit rate": ("prefix_cache_hit_rate", float),
    "cpu prefix cache hit rate": ("cpu_prefix_cache_hit_rate", float),
    "external prefix cache hit rate": ("external_prefix_cache_hit_rate", float),
    "mm cache hit rate": ("mm_cache_hit_rate", float),
}

_ITER_RE = re.compile(r"^Iteration\((?P<i>\d+)\):\s*(?P<rest>.*)$")
# (?<!\d) and a bounded count keep this linear on a long run of digits
_ITER_PART_RE = re.compile(
    r"(?<!\d)(\d{1,18}) (context requests|context tokens|generation requests|generation tokens)"
)
_ITER_TIME_RE = re.compile(r"elapsed time:\s*([\d.]+)\s*ms")

_PREEMPT_RE = re.compile(
    r"Sequence group (?P<id>\S+) is preempted by (?:PreemptionMode\.)?(?P<mode>\w+) mode"
)
_PREEMPT_CUM_RE = re.compile(r"total_num_cumulative_preemption=(\d+)")

_NON_DEFAULT_RE = re.compile(r"non-default args:\s*(?P<d>\{.*)$", re.DOTALL)
_ENGINE_CFG_RE = re.compile(
    r"Initializing an? (?:V\d+ )?LLM engine(?: \(v?(?P<v>[^)\s]*)\))? with config:\s*(?P<cfg>.*)$", re.DOTALL
)
_CHUNKED_RE = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
# VllmConfig.__post_init__ of 0.14-0.25 says which (0.32 no longer does, and its CPU backend is off)
_ASYNC_RE = re.compile(r"Asynchronous scheduling is (enabled|disabled)\b")
_AVAIL_KV_RE = re.compile(r"Available KV cache memory:\s*(-?[\d.]+)\s*GiB")
# vLLM's CPU worker: "Auto set (KV/TOTAL) GiB for KV cache on node N, with ... requested memory"
# (sized from gpu_memory_utilization of the node's memory) or "Explicitly set (KV/TOTAL) GiB ..."
_CPU_KV_SET_RE = re.compile(r"(?:Auto|Explicitly) set \((?P<kv>[\d.]+)/(?P<total>[\d.]+)\) GiB for KV cache")
# per rank; vLLM before 0.7 said "Loading model weights took 14.99 GB" (GiB, in fact)
_WEIGHTS_RE = re.compile(r"(?:Model loading|Loading model weights) took\s*(-?[\d.]+)\s*Gi?B")
_KV_SIZE_RE = re.compile(r"(?:(?P<dev>[A-Z]{2,4}) )?KV cache size:\s*(?P<n>[\d,]+)\s*tokens")
_MAX_CONC_RE = re.compile(r"Maximum concurrency for (?P<tok>[\d,]+) tokens per request:\s*(?P<x>[\d.]+)x")
_BLOCKS_RE = re.compile(
    r"(?:^|(?<=[\s#]))(?:# )?(?P<dev>[A-Z]{2,4}) blocks: (?P<g>\d+)(?:,\s*(?:# )?CPU blocks: (?P<c>\d+))?"
)
# V0.6 (one line, two spellings) and V0.7 (prose over three lines) memory profiling reports
_MEM_PROFILE_RE = re.compile(r"Memory profiling results:")
_MEM_PROFILE_KV_RE = re.compile(r"\b(total_gpu_memory|kv_cache_size|gpu_memory_utilization)=([\d.]+)")
_MEM_BUDGET_RE = re.compile(
    r"total_gpu_memory \((?P<total>[\d.]+)\s*GiB\) x gpu_memory_utilization \((?P<util>[\d.]+)\)"
)
_MEM_KV_REST_RE = re.compile(r"the rest of the memory reserved for KV Cache is (?P<kv>-?[\d.]+)\s*GiB")
# vllm-ascend's worker, in bytes: "Available memory: 43599749939, total memory: 65452113920"
_ASCEND_MEM_RE = re.compile(r"^Available memory: (?P<avail>-?\d+), total memory: (?P<total>\d+)\s*$")
_SPEC_MARK = "SpecDecoding metrics:"
_SPEC_V0_MARK = "Speculative metrics:"
_SPEC_PART_RE = re.compile(
    r"(?P<key>[A-Za-z][A-Za-z -]*?):\s*(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)|nan)\s*(?P<unit>%)?"
)
_SPEC_KEYS = {
    "mean acceptance length": "mean_acceptance_length",
    "accepted throughput": "accepted_throughput",
    "drafted throughput": "drafted_throughput",
    "accepted": "accepted_tokens",
    "drafted": "drafted_tokens",
    "avg draft acceptance rate": "acceptance_rate",
    "draft acceptance rate": "acceptance_rate",
    "system efficiency": "system_efficiency",
    "number of speculative tokens": "num_speculative_tokens",
    "number of accepted tokens": "accepted_tokens",
    "number of draft tokens": "drafted_tokens",
    "number of emitted tokens": "emitted_tokens",
}
_BANNER_CHARS = frozenset("█▄▀")
_BANNER_VERSION_RE = re.compile(r"\bversion\s+v?(\d+\.\d+[\w.+-]*)\s*$")
_BANNER_MODEL_RE = re.compile(r"\bmodel\s+(\S.*)")  # rstrip()ed: a lazy .*?\s*$ is quadratic on spaces
_API_VERSION_RE = re.compile(r"vLLM API server version v?(\d+\.\d+[\w.+-]*)")
_STARTING_RE = re.compile(r"Starting vLLM (?:API )?server\b.{0,200}?\bon (?P<url>\S+)")
_MAX_MODEL_LEN_RE = re.compile(r"^Using max model len (\d+)")
_NUM_BLOCKS_IS_RE = re.compile(r"\bnum_gpu_blocks is:?\s*(\d+)")
_ARCH_RE = re.compile(r"^Resolved architecture: (\S+)")

_FREE_MEM_RE = re.compile(
    r"Free memory on device(?: \S+)? \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup is less than "
    r"desired GPU memory utilization \((?P<util>[\d.]+), (?P<req>[\d.]+) GiB\)"
)
_MAX_SEQ_KV_RE = re.compile(
    r"The model's max seq len \((?P<seq>\d+)\) is larger than the maximum number of tokens that can be "
    r"stored in KV cache \((?P<kv>\d+)\)"
)
_MAX_SEQ_KV_V1_RE = re.compile(
    r"max seq len \((?P<seq>\d+)\),?\s*\(?(?P<need>[\d.]+) GiB KV cache is needed, which is larger than "
    r"the available KV cache memory \((?P<avail>[\d.]+) GiB\)"
)
# vLLM's GPU worker, when kv_cache_memory_bytes sizes the cache (0.25-0.32 at least): "Initial free
# memory 138.12 GiB, reserved 6.0 GiB memory for KV Cache as specified by kv_cache_memory_bytes ..."
_INIT_FREE_RE = re.compile(
    r"Initial free memory (?P<free>[\d.]+) GiB, reserved (?P<kv>[\d.]+) GiB memory for KV Cache"
)
# and, when gpu_memory_utilization sizes it (0.29+; text of vllm/v1/worker/gpu_worker.py, 0.32.0):
# "Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB). Actual
# usage is W GiB for consumed memory (weights + non-torch), A GiB for peak activation, and C GiB for
# CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=N` (.. GiB) to fit
# into requested memory, or `--kv-cache-memory=M` (.. GiB) to fully utilize gpu memory. Current kv
# cache memory in use is K GiB."
_KV_SUGGEST_RE = re.compile(
    r"Free memory on device \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on startup\. Desired GPU memory"
    r".{0,200}? (?P<act>[\d.]+) GiB for peak activation, and (?P<cg>[\d.]+) GiB for CUDAGraph memory"
    r".{0,200}?`--kv-cache-memory=(?P<req>-?\d+)`.{0,100}?`--kv-cache-memory=(?P<full>-?\d+)`"
    r"(?:.{0,200}?Current kv cache memory in use is (?P<cur>[\d.]+) GiB)?"
)
# "Graph capturing finished in 7 secs, took 12.00 GiB" (the CUDA graphs' memory)
_GRAPH_MEM_RE = re.compile(r"Graph capturing finished in [\d.]+ secs?, took (-?[\d.]+) GiB")
_OOM_RE = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")
_ENGINE_EXC_RE = re.compile(r"EngineCore (?:encountered a fatal error|hit an exception)")
# a traceback's source line (``    raise ValueError(``, ``File "x.py", line 3``) quotes code, not an error
_SOURCE_LINE_RE = re.compile(r"^(?:raise\b|File \"|return\b|\^+$|~+)")
_REQUEST_LOG_RE = re.compile(r"^(?:Received request|Added request|Generated response)")


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _parse_stats(msg: str) -> dict[str, Any] | None:
    marks = [i for i in (msg.find(_STATS_MARK), msg.find("Avg generation throughput")) if i >= 0]
    if not marks:
        return None
    fields: dict[str, Any] = {}
    hm = _ENGINE_HEAD_RE.search(msg)
    if hm and hm.start() <= min(marks):
        fields["engine"] = str(int(hm.group(1)))
        idx = hm.end()
    else:
        idx = min(marks)
    body = msg[idx : idx + _MAX_STATS_BODY].rstrip()  # a real stats line is < 1 KB
    if body.endswith("."):
        body = body[:-1]
    extra: dict[str, Any] = {}
    v0 = False
    for part in split_top(body):
        part = part.strip()
        if not part or len(part) > _MAX_STATS_PART:
            continue  # a real part is "Running: 3 reqs"; a long one only costs (the pattern backtracks)
        m = _STATS_PART_RE.match(part)
        if not m:
            key, _, rest = part.partition(":")
            if rest:
                extra[re.sub(r"\W+", "_", key.strip().lower()).strip("_")] = rest.strip()
            continue
        key = m["key"].strip()
        lkey = key.lower()
        try:
            value = float(m["num"])
        except ValueError:
            continue
        if m["unit"] == "%":
            value = round(value / 100.0, 10)
        if lkey in ("swapped", "pending"):
            v0 = True
        dm = _DEVICE_KV_RE.match(key)
        if dm:
            dev = dm["dev"]
            if "kv_cache_usage" in fields and dev == "CPU":
                fields["cpu_kv_cache_usage"] = value
            elif "kv_cache_usage" not in fields:
                fields["kv_cache_usage"] = value
                if dev:
                    fields["device"] = dev
            continue
        spec = _STATS_KEYS.get(lkey)
        if spec is None:
            extra[re.sub(r"\W+", "_", lkey).strip("_")] = value
            continue
        name, typ = spec
        fields[name] = int(value) if typ is int and value == value and abs(value) != float("inf") else value
    if "prompt_throughput" not in fields and "generation_throughput" not in fields:
        return None
    fields["format"] = "v0" if v0 else "v1"
    if extra:
        fields["extra"] = extra
    return fields


def _parse_spec(msg: str) -> dict[str, Any] | None:
    """``SpecDecoding metrics: Mean acceptance length: 2.71, ..., Avg Draft acceptance rate:
    57.3%`` (V1; older V1 put ``Draft acceptance rate`` first) and V0's ``Speculative
    metrics: Draft acceptance rate: 0.651, System efficiency: 0.570, ...``: acceptance rate
    as a ratio, mean acceptance length, accepted and drafted tokens; format ``spec_decode``."""
    idx = msg.find(_SPEC_MARK)
    idx = idx + len(_SPEC_MARK) if idx >= 0 else msg.find(_SPEC_V0_MARK) + len(_SPEC_V0_MARK)
    fields: dict[str, Any] = {}
    for part in split_top(msg[idx:].rstrip(". ")):
        m = _SPEC_PART_RE.match(part.strip())
        if not m:
            continue
        name = _SPEC_KEYS.get(m["key"].strip().lower())
        if name is None:
            continue
        try:
            value = float(m["num"])
        except ValueError:
            continue
        if m["unit"] == "%" or (name == "acceptance_rate" and value > 1.0):
            value = round(value / 100.0, 10)
        fields[name] = int(value) if name.endswith("_tokens") and value.is_integer() else value
    if not fields:
        return None
    fields["format"] = "spec_decode"
    return fields


def _parse_iteration(msg: str) -> dict[str, Any] | None:
    m = _ITER_RE.match(msg)
    if not m:
        return None
    fields: dict[str, Any] = {"iteration": int(m["i"])}
    rest = m["rest"]
    for n, what in _ITER_PART_RE.findall(rest):
        fields[what.replace(" ", "_")] = int(n)
    tm = _ITER_TIME_RE.search(rest)
    if tm:
        with contextlib.suppress(ValueError):
            fields["elapsed_seconds"] = float(tm.group(1)) / 1000.0
    fields["dummy"] = "(dummy)" in rest
    return fields


def _facts(msg: str) -> list[dict[str, Any]]:
    """Every startup fact in ``msg``, in order of appearance."""
    out: list[dict[str, Any]] = []
    m = _NON_DEFAULT_RE.search(msg)
    if m:
        args, unparsed = lenient_dict(m["d"])
        fact: dict[str, Any] = {"fact": "non_default_args", "value": redact_obj(args)}
        if unparsed:
            fact["unparsed"] = unparsed
        return [fact]
    m = _ENGINE_CFG_RE.search(msg)
    if m:
        cfg = redact_obj(parse_kv_config(m["cfg"]))
        out.append({"fact": "engine_config", "value": cfg})
        if m["v"]:
            out.append({"fact": "vllm_version", "value": m["v"]})
        return out
    if not _BANNER_CHARS.isdisjoint(msg):  # a banner character anywhere (a scan in C, F27)
        vm = _BANNER_VERSION_RE.search(msg)
        if vm:
            out.append({"fact": "vllm_version", "value": vm.group(1)})
        mm = _BANNER_MODEL_RE.search(msg)
        if mm:
            out.append({"fact": "model", "value": mm.group(1).rstrip()})
        return out
    found: list[tuple[int, dict[str, Any]]] = []
    for km in _KV_SIZE_RE.finditer(msg):
        item: dict[str, Any] = {"fact": "kv_cache_tokens", "value": _num(km["n"])}
        if km["dev"]:
            item["device"] = km["dev"]
        found.append((km.start(), item))
    for cm in _MAX_CONC_RE.finditer(msg):
        found.append((cm.start(), {"fact": "max_concurrency", "value": float(cm["x"])}))
        found.append(
            (cm.start() + 1, {"fact": "max_concurrency_tokens_per_request", "value": _num(cm["tok"])})
        )
    for rx, name, conv in (
        (_CHUNKED_RE, "max_num_batched_tokens", int),
        (_ASYNC_RE, "async_scheduling", lambda word: word == "enabled"),
        (_AVAIL_KV_RE, "available_kv_cache_memory_gib", float),
        (_WEIGHTS_RE, "model_weights_gib", float),
        (_GRAPH_MEM_RE, "cudagraph_memory_gib", float),
        (_MAX_MODEL_LEN_RE, "max_model_len", int),
        (_NUM_BLOCKS_IS_RE, "num_gpu_blocks", int),
        (_ARCH_RE, "architecture", str),
        (_API_VERSION_RE, "vllm_version", str),
    ):
        for fm in rx.finditer(msg):
            try:
                found.append((fm.start(), {"fact": name, "value": conv(fm.group(1))}))
            except ValueError:
                continue
    if _MEM_PROFILE_RE.search(msg):
        renamed = {"total_gpu_memory": "gpu_memory_gib", "kv_cache_size": "available_kv_cache_memory_gib"}
        for pm in _MEM_PROFILE_KV_RE.finditer(msg):
            name = renamed.get(pm.group(1), pm.group(1))
            with contextlib.suppress(ValueError):
                found.append((pm.start(), {"fact": name, "value": float(pm.group(2).rstrip("."))}))
    mb = _MEM_BUDGET_RE.search(msg)
    if mb:
        found.append((mb.start(), {"fact": "gpu_memory_gib", "value": float(mb["total"])}))
        found.append((mb.start() + 1, {"fact": "gpu_memory_utilization", "value": float(mb["util"])}))
    ck = _CPU_KV_SET_RE.search(msg)
    if ck:  # on the CPU backend gpu_memory_utilization is a share of the node's memory
        found.append((ck.start(), {"fact": "available_kv_cache_memory_gib", "value": float(ck["kv"])}))
        found.append((ck.start() + 1, {"fact": "gpu_memory_gib", "value": float(ck["total"])}))
    mk = _MEM_KV_REST_RE.search(msg)
    if mk:
        found.append((mk.start(), {"fact": "available_kv_cache_memory_gib", "value": float(mk["kv"])}))
    im = _INIT_FREE_RE.search(msg)
    if im:
        found.append((im.start(), {"fact": "initial_free_memory_gib", "value": float(im["free"])}))
        found.append((im.start() + 1, {"fact": "available_kv_cache_memory_gib", "value": float(im["kv"])}))
    sg = _KV_SUGGEST_RE.search(msg)
    if sg:
        at = sg.start()
        found.append((at, {"fact": "initial_free_memory_gib", "value": float(sg["free"])}))
        found.append((at + 1, {"fact": "gpu_memory_gib", "value": float(sg["total"])}))
        found.append((at + 2, {"fact": "peak_activation_memory_gib", "value": float(sg["act"])}))
        found.append((at + 3, {"fact": "cudagraph_memory_gib", "value": float(sg["cg"])}))
        found.append((at + 4, {"fact": "suggested_kv_cache_memory_bytes", "value": int(sg["full"])}))
        if sg["cur"] is not None:
            found.append((at + 5, {"fact": "available_kv_cache_memory_gib", "value": float(sg["cur"])}))
    am = _ASCEND_MEM_RE.match(msg)
    if am:
        gib = float(1 << 30)
        found.append(
            (0, {"fact": "available_kv_cache_memory_gib", "value": round(int(am["avail"]) / gib, 3)})
        )
        found.append((1, {"fact": "gpu_memory_gib", "value": round(int(am["total"]) / gib, 3)}))
    bm = _BLOCKS_RE.search(msg)
    if bm:
        found.append((bm.start(), {"fact": "num_gpu_blocks", "value": int(bm["g"]), "device": bm["dev"]}))
        if bm["c"] is not None:
            found.append((bm.start() + 1, {"fact": "num_cpu_blocks", "value": int(bm["c"])}))
    sm = _STARTING_RE.search(msg)
    if sm:
        found.append((sm.start(), {"fact": "api_server_url", "value": sm["url"]}))
    found.sort(key=lambda p: p[0])
    return [f for _, f in found]


def _error(msg: str) -> dict[str, Any] | None:
    if _REQUEST_LOG_RE.match(msg) or _SOURCE_LINE_RE.match(msg):
        return None  # request logs can quote any prompt text; source lines quote code
    if "No available memory for the cache blocks" in msg:
        return {"error": "no_kv_memory"}
    if "is less than desired GPU memory utilization" in msg:
        out: dict[str, Any] = {"error": "free_memory_below_utilization"}
        m = _FREE_MEM_RE.search(msg)
        if m:
            out.update(
                free_gib=float(m["free"]),
                total_gib=float(m["total"]),
                gpu_memory_utilization=float(m["util"]),
                requested_gib=float(m["req"]),
            )
        return out
    m = _MAX_SEQ_KV_RE.search(msg)
    if m:
        return {
            "error": "max_seq_len_above_kv_capacity",
            "max_seq_len": int(m["seq"]),
            "kv_cache_tokens": int(m["kv"]),
        }
    m = _MAX_SEQ_KV_V1_RE.search(msg)
    if m:
        return {
            "error": "max_seq_len_above_kv_capacity",
            "max_seq_len": int(m["seq"]),
            "needed_gib": float(m["need"]),
            "available_gib": float(m["avail"]),
        }
    if "EngineCore failed to start" in msg or "Engine core initialization failed" in msg:
        return {"error": "engine_start_failed"}
    if _ENGINE_EXC_RE.search(msg):
        return {"error": "engine_core_exception"}
    if _OOM_RE.search(msg):
        return {"error": "out_of_memory"}
    return None


def parse_line(line: str, year: int | None = None, near: float | None = None) -> LogEvent:
    """Turn one logical log line into a :class:`LogEvent` (pure; never raises).

    ``year`` completes vLLM's year-less timestamps; without it, the year nearest to ``near``
    (a Unix time the line was written around, default now) does.
    Kinds and fields:

    * ``engine_stats``: ``engine`` (str), ``prompt_throughput``, ``generation_throughput``
      (tokens/s), ``running``, ``waiting`` (V0 ``Pending``), ``swapped``, ``deferred``,
      ``preemptions``, ``corrupted`` (ints, absent when not printed), ``kv_cache_usage``,
      ``cpu_kv_cache_usage``, ``prefix_cache_hit_rate``, ``cpu_prefix_cache_hit_rate``,
      ``external_prefix_cache_hit_rate``, ``mm_cache_hit_rate`` (ratios 0..1), ``device``
      (``GPU``/``CPU``/...), ``format`` (``v1``, ``v0``, or ``v0_prefix_cache`` for V0's
      separate ``Prefix cache hit rate: GPU: x%, CPU: y%`` line), ``extra`` (unknown parts).
    * ``iteration``: ``iteration``, ``context_requests``, ``context_tokens``,
      ``generation_requests``, ``generation_tokens``, ``elapsed_seconds``, ``dummy``.
    * ``preemption``: ``mode`` (``recompute``/``swap``), ``cumulative`` (int or None),
      ``request_id``.
    * ``startup``: ``fact``, ``value`` (+ ``device`` on KV facts, ``unparsed`` keys on
      ``non_default_args``) and ``also`` for further facts on the same line.
    * ``error``: ``error`` plus the numbers the message carries.
    * ``unknown``: everything else.

    Every event also carries ``level`` and ``pid`` in ``fields`` when the line had them.
    """
    try:
        return _parse_line(line, year, near)
    except Exception as exc:  # defensive: a parser bug must not stop a follower
        return LogEvent(
            "unknown", None, {"parse_error": type(exc).__name__}, None, redact_text(clean_line(line))
        )


def _parse_line(line: str, year: int | None, near: float | None) -> LogEvent:
    if not isinstance(line, str):
        line = (
            bytes(line).decode("utf-8", errors="replace")
            if isinstance(line, bytes | bytearray)
            else str(line)
        )
    p = strip_prefixes(line, year, near)
    msg = p.message.strip()
    base: dict[str, Any] = {}
    if p.level:
        base["level"] = p.level
    if p.pid is not None:
        base["pid"] = p.pid

    def ev(kind: str, fields: dict[str, Any]) -> LogEvent:
        # the text is kept (cleaned, redacted) only where it is provenance: an unknown line's is
        # read by nothing, and redacting each line of a flood was most of its parsing (F27)
        stored = "" if kind == "unknown" else redact_text(clean_line(line))
        return LogEvent(kind, p.t, {**base, **fields}, p.process, stored)

    if _STATS_MARK in msg or "Avg generation throughput" in msg:
        stats = _parse_stats(msg)
        if stats is not None:
            return ev("engine_stats", stats)
    if _SPEC_MARK in msg or _SPEC_V0_MARK in msg:
        spec = _parse_spec(msg)
        if spec is not None:
            return ev("engine_stats", spec)
    m = _PREEMPT_RE.search(msg) if "is preempted by" in msg else None
    if m:  # V0's scheduler warning: counted with or without its logger prefix (pasted bare)
        cm = _PREEMPT_CUM_RE.search(msg)
        return ev(
            "preemption",
            {
                "mode": m["mode"].lower(),
                "cumulative": int(cm.group(1)) if cm else None,
                "request_id": m["id"],
            },
        )
    if not p.has_vllm_prefix and p.message[:1].isspace():
        return ev("unknown", {})  # an indented line: a traceback's source, a warning's code
    bm = _BLOCKS_RE.search(msg)
    if bm and int(bm["g"]) == 0:
        # the engine found no memory for a single KV block: it cannot serve (vLLM then raises)
        return ev("error", {"error": "no_kv_blocks", "num_gpu_blocks": 0, "device": bm["dev"]})
    m = _V0_PREFIX_HIT_RE.match(msg)
    if m:
        return ev(
            "engine_stats",
            {
                "prefix_cache_hit_rate": round(float(m["gpu"]) / 100.0, 10),
                "cpu_prefix_cache_hit_rate": round(float(m["cpu"]) / 100.0, 10),
                "format": "v0_prefix_cache",
            },
        )
    if msg.startswith("Iteration("):
        it = _parse_iteration(msg)
        if it is not None:
            return ev("iteration", it)
    facts = _facts(msg)
    if facts:
        first = dict(facts[0])
        if len(facts) > 1:
            first["also"] = facts[1:]
        return ev("startup", first)
    err = _error(msg)
    if err is not None:
        return ev("error", err)
    return ev("unknown", {})


def event_facts(event: LogEvent) -> list[tuple[str, Any]]:
    """All ``(fact, value)`` pairs a startup event carries (its own and ``also``)."""
    if event.kind != "startup":
        return []
    out: list[tuple[str, Any]] = []
    if "fact" in event.fields:
        out.append((event.fields["fact"], event.fields.get("value")))
    for item in event.fields.get("also", ()) or ():
        if isinstance(item, Mapping) and "fact" in item:
            out.append((item["fact"], item.get("value")))
    return out


def collect_facts(events: Iterable[LogEvent]) -> dict[str, Any]:
    """Fold startup facts into one dict; a later fact replaces an earlier one (a server
    restart in the same log wins). ``non_default_args`` and ``engine_config`` are dicts."""
    out: dict[str, Any] = {}
    for e in events:
        for k, v in event_facts(e):
            out[k] = v
    return out


def parse_lines(
    lines: Iterable[str], year: int | None = None, join: bool = True, near: float | None = None
) -> Iterator[LogEvent]:
    """Events from raw lines: rejoin wrapped lines (unless ``join=False``), then
    :func:`parse_line` each (``year``/``near`` as there)."""
    src = join_lines(lines) if join else lines
    for line in src:
        yield parse_line(line, year, near)


# --------------------------------------------------------------------------- counting


@dataclass
class LogCounts:
    """Events counted by kind (every kind in ``model.EVENT_KINDS`` is present, 0 or more)."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(EVENT_KINDS, 0))

    def add(self, event: LogEvent) -> None:
        kind = event.kind if event.kind in self.counts else "unknown"
        self.counts[kind] += 1

    def update(self, events: Iterable[LogEvent]) -> LogCounts:
        for e in events:
            self.add(e)
        return self

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, int]:
        return dict(self.counts)


def count_events(events: Iterable[LogEvent]) -> dict[str, int]:
    """``{kind: count}`` over all of ``EVENT_KINDS`` (for ``inspect``)."""
    return LogCounts().update(events).as_dict()
