"""Helpers that derive page variants from real captures, for what cannot run here.

vLLM V0 (0.5-0.7), Ray's `ray_vllm:` prefix and data-parallel servers with several
engines cannot be run on this CPU machine, so these helpers rewrite a REAL page
captured from vLLM 0.32 into the spellings those versions use (names from vLLM's
own `vllm/engine/metrics.py` of the V0 era). Each test that uses one says so.
"""

from __future__ import annotations

import re
from pathlib import Path

PAGES = Path(__file__).parent / "fixtures" / "pages"

V1_TO_V0 = {
    "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
    "vllm:inter_token_latency_seconds": "vllm:time_per_output_token_seconds",
    "vllm:prefix_cache_queries": "vllm:gpu_prefix_cache_queries",
    "vllm:prefix_cache_hits": "vllm:gpu_prefix_cache_hits",
}


def page(name: str) -> str:
    return (PAGES / name).read_text()


def as_v0(text: str) -> str:
    """A V1 page respelled as V0: renamed families, no `engine` label, plus V0-only gauges."""
    for new, old in V1_TO_V0.items():
        text = re.sub(re.escape(new) + r"(?=[_{ \n])", old, text)
    text = re.sub(r'engine="\d+",?', "", text).replace("{}", "")
    extra = (
        "# HELP vllm:num_requests_swapped Number of requests swapped to CPU.\n"
        "# TYPE vllm:num_requests_swapped gauge\n"
        'vllm:num_requests_swapped{model_name="tiny-llama"} 0.0\n'
        "# HELP vllm:avg_generation_throughput_toks_per_s Average generation throughput in tokens/s.\n"
        "# TYPE vllm:avg_generation_throughput_toks_per_s gauge\n"
        'vllm:avg_generation_throughput_toks_per_s{model_name="tiny-llama"} 231.5\n'
    )
    return text + extra


def as_ray(text: str) -> str:
    """Ray Serve's exporter: `ray_vllm:` prefix and no TYPE/HELP lines (untyped)."""
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    return "\n".join(ln.replace("vllm:", "ray_vllm:", 1) for ln in lines) + "\n"


def with_engines(text: str, n: int) -> str:
    """A data-parallel page: every `engine="0"` series repeated for engines 0..n-1.

    Counter and histogram values are scaled by (engine + 1) so sums are checkable;
    gauges too, except ratios, which are kept in [0, 1].
    """
    out: list[str] = []
    for ln in text.splitlines():
        if 'engine="0"' not in ln or ln.startswith("#"):
            out.append(ln)
            continue
        name, _, value = ln.rpartition(" ")
        for e in range(n):
            v = float(value)
            scaled = v if "_perc" in name or "info" in name else v * (e + 1)
            engine_label = 'engine="' + str(e) + '"'
            out.append(name.replace('engine="0"', engine_label) + " " + repr(scaled))
    return "\n".join(out) + "\n"


_SAMPLE_LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?( .*)")


def as_utf8(text: str) -> str:
    """A page as Prometheus 3's UTF-8 exposition writes it (``escaping=allow-utf-8``): every
    metric name quoted, inside the braces on sample lines (``{"vllm:x",a="b"} 1``), and in the
    ``# HELP``/``# TYPE`` lines (rewritten: no vLLM release writes it yet)."""
    out = []
    for ln in text.split("\n"):
        if ln.startswith(("# HELP ", "# TYPE ")):
            name, _, rest = ln[7:].partition(" ")
            out.append(f'{ln[:7]}"{name}"' + (f" {rest}" if rest else ""))
            continue
        m = _SAMPLE_LINE.fullmatch(ln)
        if m is None:
            out.append(ln)
            continue
        labels = f",{m.group(2)}" if m.group(2) else ""
        out.append(f'{{"{m.group(1)}"{labels}}}{m.group(3)}')
    return "\n".join(out)
