"""The step math: a rule's ``{direction, step}`` (``-25%``, ``x2``, ``+0.05``) turned into one
concrete, valid value of a knob within its safe range and the server's limits, or ``None``
when the knob cannot move (already at its bound).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from advisor.core.architectures import architecture_is_moe, supports_encoder_tp_data
from advisor.core.defaults import DEFAULTS_TABLE, DefaultRow, Hardware, default_for, parse_version
from advisor.core.knobs import (
    KNOBS,
    Knob,
    coerce,
    format_bytes,
    format_flag,
    format_value,
    get_knob,
    knob_for_flag,
)
from advisor.core.model import EngineInfo

# --------------------------------------------------------------------------------------
# step math


@dataclass(frozen=True)
class Limits:
    """What bounds a proposal beyond the knob's safe range; every field optional."""

    max_model_len: int | None = None
    max_num_seqs: int | None = None
    enable_chunked_prefill: bool | None = None
    num_attention_heads: int | None = None
    num_layers: int | None = None
    host_gpus: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1

    @staticmethod
    def from_engine(info: EngineInfo, host_gpus: int | None = None) -> Limits:
        def _int(name: str, default: int | None = None) -> int | None:
            v = info.get(name)
            try:
                return int(v) if v is not None else default
            except (TypeError, ValueError):
                return default

        return Limits(
            max_model_len=_int("max_model_len"),
            max_num_seqs=_int("max_num_seqs"),
            enable_chunked_prefill=info.get("enable_chunked_prefill"),
            num_attention_heads=_int("num_attention_heads"),
            num_layers=_int("num_layers"),
            host_gpus=host_gpus if host_gpus is not None else _int("gpu_count"),
            tensor_parallel_size=_int("tensor_parallel_size", 1) or 1,
            pipeline_parallel_size=_int("pipeline_parallel_size", 1) or 1,
            data_parallel_size=_int("data_parallel_size", 1) or 1,
        )


MNBT_FLOOR = 2048  # below this, halving the budget costs throughput for little ITL gain
MNBT_DOUBLING_CAP = 16384  # doubling stops at max(max_model_len, this)
GMU_CAP = 0.95
GMU_STEP = 0.05  # the KV rules' gpu_memory_utilization step: that share of the device must be free
KV_MIN_GROWTH = 0.25  # the smallest KV-bytes step the advisor proposes (scoring's ladder starts at +25%)

_STEP_RE = re.compile(r"^\s*(?P<op>[-+x*/=])\s*(?P<num>[^%\s]*)\s*(?P<pct>%?)\s*$")


@dataclass(frozen=True)
class Step:
    op: str  # "mul" | "add" | "set"
    amount: Any


def parse_step(step: str) -> Step:
    """``-25%`` -> mul 0.75; ``+25%`` -> mul 1.25; ``x2``/``*2`` -> mul 2; ``/2`` -> mul 0.5;
    ``+0.05``/``-4`` -> add; ``=0``/``=shm``/``=true`` -> set. ValueError on anything else."""
    m = _STEP_RE.match(step or "")
    if not m:
        raise ValueError(f"bad step {step!r}: expected -25%, +25%, x2, /2, +0.05, -0.05 or =VALUE")
    op, num, pct = m.group("op"), m.group("num"), m.group("pct")
    if op == "=":
        if not num:
            raise ValueError(f"bad step {step!r}: '=' needs a value")
        return Step("set", num)
    if not re.fullmatch(r"\d+(?:\.\d+)?|\.\d+", num):
        raise ValueError(f"bad step {step!r}: {num!r} is not a plain number")
    try:
        n = float(num)
    except ValueError:
        raise ValueError(f"bad step {step!r}: {num!r} is not a number") from None
    if n < 0 or (op in "x*/" and n == 0):
        raise ValueError(f"bad step {step!r}")
    if pct:
        if op not in "+-":
            raise ValueError(f"bad step {step!r}: a percentage needs + or -")
        return Step("mul", 1 + (n / 100 if op == "+" else -n / 100))
    if op in "x*":
        return Step("mul", n)
    if op == "/":
        return Step("mul", 1 / n)
    return Step("add", n if op == "+" else -n)


DIRECTIONS = ("increase", "decrease", "set", "enable", "disable")


def propose(
    knob_name: str,
    current: Any,
    direction: str,
    step: str,
    *,
    bound_hint: float | None = None,
    limits: Limits | None = None,
) -> Any:
    """A concrete, valid new value for ``knob_name`` moved from ``current`` in ``direction``
    by ``step``, or None when it cannot move (already at its bound, or nothing valid lies in
    that direction).

    - integers: a decrease rounds down and moves at least 1; an increase rounds up and moves
      at least 1; the result is clamped to the knob's safe range;
    - ``bound_hint`` grounds the value: a decrease goes at least down to floor(hint), an
      increase at least up to ceil(hint) (e.g. max_num_seqs 256 -25% with hint 128 -> 128);
    - max_num_batched_tokens is cut no lower than 2048 (a raise from below it moves by its
      step: the model weighs what the extra prefill per step costs the decodes), and stays
      >= max_num_seqs and (without chunked prefill) >= max_model_len; it grows up to max(max_model_len, 16384) and max_num_seqs *
      max_model_len (8192 x2 with max_model_len 8192 -> 16384: with chunked prefill a
      budget above max_model_len is valid and schedules several prefills per step; beyond
      that doubling rarely pays when no request is longer, and long chunks stall decodes);
    - gpu_memory_utilization moves to 2 decimals and never above 0.95;
    - parallel sizes move to the next valid value: tensor_parallel_size divides the number
      of attention heads when known (otherwise a power of two), and tp*pp*dp fits the
      host's GPUs when known (unknown GPU count: no increase).
    """
    k = get_knob(knob_name)
    lim = limits or Limits()
    if direction not in DIRECTIONS:
        raise ValueError(f"bad direction {direction!r}: expected one of {', '.join(DIRECTIONS)}")
    st = parse_step(step) if step else Step("set", "true" if direction == "enable" else "false")

    if k.type is bool or direction in ("enable", "disable"):
        if k.type is not bool:
            raise ValueError(f"{k.name} is not a boolean knob")
        target = direction == "enable" if direction in ("enable", "disable") else bool(coerce(k, st.amount))
        cur = coerce(k, current) if current is not None else None
        return None if cur is target else target

    if st.op == "set":
        wanted = coerce(k, st.amount)
        if k.choices and wanted not in k.choices:
            raise ValueError(f"{k.name}: {wanted!r} is not one of {', '.join(k.choices)}")
        if isinstance(wanted, int | float) and not _within(k, wanted):
            return None
        cur = coerce(k, current) if current is not None else None
        return None if cur == wanted else wanted

    if k.type is str:
        raise ValueError(f"{k.name} takes only '=VALUE' steps")
    if direction == "set":
        raise ValueError(f"direction 'set' needs a '=VALUE' step, got {step!r}")
    if k.name == "max_num_active_seqs" and current is None:
        # unset, the admission limit is max_num_seqs (vLLM's Scheduler.max_num_active_reqs)
        current = lim.max_num_seqs
    if current is None:
        return None
    cur_n = coerce(k, current)
    up = direction == "increase"
    if k.unlimited_at is not None and cur_n == k.unlimited_at:
        # no limit (0 for long_prefill_token_threshold): a decrease sets one, at the rule's value
        # (the bound), at most max_model_len
        if up or bound_hint is None:
            return None
        limit = math.floor(bound_hint)
        if lim.max_model_len:
            limit = min(limit, lim.max_model_len)
        return limit if limit >= 1 and _within(k, limit) else None
    raw = cur_n * st.amount if st.op == "mul" else cur_n + st.amount
    if (raw > cur_n) != up and raw != cur_n:
        raise ValueError(f"step {step!r} does not go in direction {direction!r}")

    if k.name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        return _propose_parallel(k, int(cur_n), up, raw, lim)

    if k.type is float:
        value: Any = round(raw, 2)
        if bound_hint is not None:
            value = min(value, bound_hint) if not up else max(value, bound_hint)
        lo, hi = _bounds(k, lim, up)
        value = min(max(value, lo), hi)
        value = round(value, 2)
        if (up and value <= cur_n) or (not up and value >= cur_n):
            return None
        return value

    # integers
    if up:
        value = max(math.ceil(raw - 1e-9), cur_n + 1)
        if bound_hint is not None:
            value = max(value, math.ceil(bound_hint))
    else:
        value = min(math.floor(raw + 1e-9), cur_n - 1)
        if bound_hint is not None:
            value = min(value, math.floor(bound_hint))
    lo, hi = _bounds(k, lim, up)
    if lo > hi:
        return None
    value = int(min(max(value, lo), hi))
    if (up and value <= cur_n) or (not up and value >= cur_n):
        return None
    return value


def _within(k: Knob, value: float) -> bool:
    return (k.min is None or value >= k.min) and (k.max is None or value <= k.max)


def _bounds(k: Knob, lim: Limits, up: bool) -> tuple[float, float]:
    lo = k.min if k.min is not None else -math.inf
    hi = k.max if k.max is not None else math.inf
    if k.name == "max_num_batched_tokens":
        if not up:  # a cut stops at the floor; a raise from below it moves by its own step
            lo = max(lo, MNBT_FLOOR)
        if lim.max_num_seqs:
            lo = max(lo, lim.max_num_seqs)
        if lim.enable_chunked_prefill is False and lim.max_model_len:
            lo = max(lo, lim.max_model_len)
        hi = min(hi, max(lim.max_model_len or 0, MNBT_DOUBLING_CAP))
        if lim.max_num_seqs and lim.max_model_len:
            hi = min(hi, max(lim.max_num_seqs * lim.max_model_len, lo))
    elif k.name == "gpu_memory_utilization":
        hi = min(hi, GMU_CAP)
    elif k.name == "max_num_seqs":
        lo = max(lo, 1)
    elif k.name == "max_num_active_seqs" and lim.max_num_seqs:
        hi = min(hi, lim.max_num_seqs)  # vLLM refuses to start with it above max_num_seqs
    elif k.unlimited_at is not None:
        lo = max(lo, 1)  # 0 is no limit, not the smallest one
        if lim.max_model_len:
            hi = min(hi, lim.max_model_len)
    return lo, hi


def _propose_parallel(k: Knob, cur: int, up: bool, target: float, lim: Limits) -> int | None:
    others = {
        "tensor_parallel_size": lim.pipeline_parallel_size * lim.data_parallel_size,
        "pipeline_parallel_size": lim.tensor_parallel_size * lim.data_parallel_size,
        "data_parallel_size": lim.tensor_parallel_size * lim.pipeline_parallel_size,
    }[k.name]
    hi = int(k.max or 64)
    if up:
        if lim.host_gpus is None:
            return None
        hi = min(hi, lim.host_gpus // max(1, others))

    def valid(v: int) -> bool:
        if v < 1 or v > hi:
            return False
        if k.name == "tensor_parallel_size":
            if lim.num_attention_heads:
                return lim.num_attention_heads % v == 0
            return v & (v - 1) == 0  # a power of two
        if k.name == "pipeline_parallel_size" and lim.num_layers:
            return v <= lim.num_layers
        return True

    if up:
        cands = [v for v in range(cur + 1, hi + 1) if valid(v)]
        if not cands:
            return None
        at_least = [v for v in cands if v >= target]
        return at_least[0] if at_least else cands[-1]
    cands = [v for v in range(cur - 1, 0, -1) if valid(v)]
    if not cands:
        return None
    at_most = [v for v in cands if v <= target]
    return at_most[0] if at_most else cands[-1]


def _float(x: Any) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def memory_full(knob_name: str, engine: EngineInfo) -> str | None:
    """Why a larger KV cache does not fit in the device's memory (None: it may, or the free
    memory is unknown). The free memory is what the start-up log (or the host's GPU probe) says
    is left once the engine started (``gpu_memory_free_gib``): gpu_memory_utilization's step
    needs GMU_STEP of the device free, kv_cache_memory_bytes' smallest step KV_MIN_GROWTH of its
    current size. The KV rules then go on to their next knob (fp8 KV, then parallelism)."""
    free = _float(engine.get("gpu_memory_free_gib"))
    if free is None:
        return None
    room = free * 2**30
    if knob_name == "gpu_memory_utilization":
        mem = _float(engine.get("gpu_memory_gib"))
        if mem is None or room >= GMU_STEP * mem * 2**30:
            return None
        return (
            f"the device has {format_bytes(room)} free after start-up, less than the "
            f"+{GMU_STEP:g} step ({format_bytes(GMU_STEP * mem * 2**30)}): memory cannot grow"
        )
    if knob_name == "kv_cache_memory_bytes":
        cur = _float(engine.get("kv_cache_memory_bytes"))
        if cur is None or room >= KV_MIN_GROWTH * cur:
            return None
        return (
            f"the device has {format_bytes(room)} free after start-up, less than the smallest "
            f"step (+{KV_MIN_GROWTH:.0%} of {format_bytes(cur)}): memory cannot grow"
        )
    return None


def applicable(
    knob_name: str, direction: str, engine: EngineInfo, host_gpus: int | None = None
) -> tuple[bool, str]:
    """Whether moving ``knob_name`` in ``direction`` can do anything on this server, with the
    reason. Unknown values never block (the advisor says what it assumed elsewhere)."""
    k = KNOBS.get(knob_name)
    if k is None:
        return False, f"unknown knob {knob_name!r}"
    version = engine.get("vllm_version")
    if not k.exists_in(None if version is None else str(version)):
        have = f"vLLM {version}" if version is not None else "the newest vLLM (version unknown)"
        when = f"removed in {k.until}" if k.until else f"added in {k.since}"
        return False, f"{have} has no {k.flag or k.env or k.name} ({when})"
    device = str(engine.get("device") or "").lower()
    if device == "cpu" and k.name == "kv_cache_dtype":
        return False, "fp8 KV is not advised on a CPU server (no measurement of it on vLLM's CPU backend)"
    if device == "cpu" and k.gpu_only:
        return False, f"{k.name} has no effect on a CPU server"
    cur = engine.get(k.name)
    if k.name == "gpu_memory_utilization" and direction == "increase":
        if engine.get("kv_cache_memory_bytes") is not None:
            return False, "the KV cache size is fixed by kv_cache_memory_bytes"
        if engine.get("num_gpu_blocks_override") is not None:
            return False, "the KV cache size is fixed by num_gpu_blocks_override"
        if cur is not None and float(cur) >= GMU_CAP:
            return False, f"gpu_memory_utilization is already {cur} (the advisor's cap is {GMU_CAP})"
    if direction == "increase" and k.name in ("gpu_memory_utilization", "kv_cache_memory_bytes"):
        full = memory_full(k.name, engine)
        if full is not None:
            return False, full
    if k.name == "kv_cache_dtype" and cur is not None and str(cur).lower().startswith("fp8"):
        return False, f"the KV cache is already {cur}"
    if (
        k.name in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
        and direction == "increase"
    ):
        gpus = host_gpus if host_gpus is not None else engine.get("gpu_count")
        if gpus is None:
            return False, "the host's GPU count is unknown"
        used = 1
        for n in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
            used *= int(engine.get(n, 1) or 1)
        if int(gpus) <= used:
            return False, f"the host has {gpus} GPU(s) and tp*pp*dp already uses {used}"
    if k.unlimited_at is not None and cur is not None and direction == "decrease":
        try:
            if float(cur) == k.unlimited_at:
                return True, ""  # no limit yet: a decrease sets one
        except (TypeError, ValueError):
            pass
    if k.type in (int, float) and cur is not None and k.name != "replicas":
        try:
            c = float(cur)
        except (TypeError, ValueError):
            return True, ""
        lo, hi = _bounds(k, Limits.from_engine(engine, host_gpus), direction == "increase")
        if direction == "increase" and c >= hi:
            return False, f"{k.name} is already {format_value(cur)}, at its upper bound"
        if direction == "decrease" and c <= lo:
            return False, f"{k.name} is already {format_value(cur)}, at its lower bound"
    if (
        k.type is bool
        and cur is not None
        and direction in ("enable", "disable")
        and bool(cur) == (direction == "enable")
    ):
        return False, f"{k.name} is already {format_value(bool(cur))}"
    return True, ""


__all__ = [
    "DEFAULTS_TABLE",
    "KNOBS",
    "DefaultRow",
    "Hardware",
    "Knob",
    "Limits",
    "Step",
    "applicable",
    "architecture_is_moe",
    "coerce",
    "default_for",
    "format_flag",
    "format_value",
    "get_knob",
    "knob_for_flag",
    "parse_step",
    "parse_version",
    "propose",
    "supports_encoder_tp_data",
]
