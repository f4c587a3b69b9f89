"""Issue 33's contract, as a new user meets ``explain``: the desired replicas in every format,
and one committed page that has no rates. Run through the console script's entry
(advisor.cli:main) in a subprocess of this checkout's interpreter."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "advisor" / "data" / "sessions" / "h200-A_s256"


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ADVISOR_")}
    e["HOME"] = str(tmp)
    return subprocess.run(
        [sys.executable, "-c", "from advisor.cli import main; main()", *args],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,  # a hang guard: a loaded 2-core machine is slow to start the interpreter
        env=e,
        stdin=subprocess.DEVNULL,
    )


# ----------------------------------------------------------------------------- desired replicas
@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_the_desired_replicas_are_in_the_text_and_markdown(tmp_path: Path, fmt: str) -> None:
    """The demo's page says 7 replicas; explain said it in no format (issue 33)."""
    p = cli(tmp_path, "explain", "--session", str(DEMO), "--format", fmt)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stdout.splitlines() if "Desired replicas:" in ln]
    assert len(lines) == 1, p.stdout
    assert "7 (1 now)" in lines[0] and "predicted at 7" in p.stdout.replace("\n", " ")


def test_the_desired_replicas_are_in_the_json(tmp_path: Path) -> None:
    p = cli(tmp_path, "explain", "--session", str(DEMO), "--format", "json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)["replicas"]
    assert r["desired"] == 7 and r["current"] == 1
    assert r["predicted_at_desired"]["replicas"] == 7


def test_explain_daemon_shows_the_daemons_desired_replicas(tmp_path: Path) -> None:
    """The demo serves the session's diagnosis; `explain --daemon` reads /api/v1/diagnosis and
    prints the same replicas line as `explain --session` (the JSON carries them)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ADVISOR_")}
    e.update(HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    argv = [sys.executable, "-c", "from advisor.cli import main; main()", "demo", "--listen", "127.0.0.1:0"]
    proc = subprocess.Popen(
        [*argv, "--serve-seconds", "300"], cwd=tmp_path, stdout=subprocess.PIPE, text=True, env=e
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or ()], daemon=True).start()
    try:
        while not (line := lines.get(timeout=300)).startswith("Page: "):  # a hang guard
            pass
        url = line.split()[1].rstrip("/")
        p = cli(tmp_path, "explain", "--daemon", url)
        assert p.returncode == 0, p.stderr
        direct = cli(tmp_path, "explain", "--session", str(DEMO))
        want = [ln for ln in direct.stdout.splitlines() if "Desired replicas:" in ln]
        assert want and [ln for ln in p.stdout.splitlines() if "Desired replicas:" in ln] == want, p.stdout
    finally:
        proc.kill()
        proc.wait()


# ----------------------------------------------------------------------------- one page
NO_RATES = "one page: no rates; give two pages or --url --window"


@pytest.mark.parametrize("page", ["h200-0.25-A_s256-peak.prom", "cpu-0.32-baseline-after.prom"])
def test_one_committed_page_has_no_rates_whatever_its_files_time(tmp_path: Path, page: str) -> None:
    """After a clone the file's time is the clone's: explain said "window 173914 s, 0.00 req/s"
    (rates up to the modification time). One page is one reading: no window, no rates, and it
    says what would give them (issue 33)."""
    src = REPO / "tests" / "fixtures" / "pages" / page
    (tmp_path / page).write_bytes(src.read_bytes())  # a fresh file: its time is now, as after a clone
    p = cli(tmp_path, "explain", "--metrics-file", page)
    assert p.returncode in (0, 4), p.stderr
    text = " ".join(p.stdout.split())
    assert NO_RATES in text, p.stdout
    assert " window " not in text and "req/s" not in text, p.stdout
    assert "Desired replicas" not in text  # no load to size from one reading
    j = json.loads(cli(tmp_path, "explain", "--metrics-file", page, "--format", "json").stdout)
    rates = {k: v for k, v in j["signals"].items() if k.endswith("per_second")}
    assert rates and all(v is None for v in rates.values()), rates
    assert j["context"]["single_page"]["note"] == NO_RATES and j["replicas"] is None


def test_one_page_names_what_it_shows_and_is_not_advised(tmp_path: Path) -> None:
    """A real H200 page at the peak: 220 waiting, 11 preemptions since the start, the KV cache
    full. Those are what one page supports; no rule needing a rate can hold."""
    page = REPO / "tests" / "fixtures" / "pages" / "h200-0.25-A_s256-peak.prom"
    p = cli(tmp_path, "explain", "--metrics-file", str(page))
    assert p.returncode == 0, p.stderr
    first = " ".join(p.stdout.split("Context:")[0].split())
    assert first.startswith("INCONCLUSIVE: one page shows 220 waiting, 11 preemptions since start"), first


# ----------------------------------------------------------------------------- run --replay
def test_a_replay_shows_its_first_diagnosis_at_its_first_page_and_stops_on_time(tmp_path: Path) -> None:
    """The demo's session: its log starts ~80 s before its first page. Played at 1/1000 of real
    time, the first page must still be read at once (the log before it is read without waiting)
    and served as up, not "vLLM is DOWN"; the next page is 5,000 s away, so what is served is the
    first page's. --run-seconds counts from the start: the process ends mid-replay (before: the
    whole replay, here ~21 hours, then --run-seconds more). The timeouts are hang guards."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_ADVISOR_")}
    e.update(HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    argv = [sys.executable, "-c", "from advisor.cli import main; main()", "run", "--replay", str(DEMO)]
    argv += ["--listen", "127.0.0.1:0", "--speed", "0.001", "--run-seconds", "20"]
    argv += ["--state-dir", str(tmp_path / "state")]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr or ()], daemon=True).start()
    try:
        listen = None
        while True:
            rec = json.loads(lines.get(timeout=300))  # the daemon's JSON log is on stderr
            if rec.get("event") == "replaying":
                listen = rec["listen"]
            if rec.get("event") == "diagnosis":  # the first page has been read and evaluated
                break
        assert listen is not None
        page = requests.get(f"http://{listen}/", timeout=30).text
        assert "DOWN" not in page and "vLLM is <b>up</b>" in page
        api = requests.get(f"http://{listen}/api/v1/diagnosis", timeout=30).json()
        assert api["status"] == "insufficient-data" and "only 0s of data" in api["reason"]
        assert proc.wait(timeout=300) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_predict_on_one_page_says_it_has_no_rates(tmp_path: Path) -> None:
    page = REPO / "tests" / "fixtures" / "pages" / "h200-0.25-A_s256-peak.prom"
    p = cli(tmp_path, "predict", "--metrics-file", str(page), "--set", "max_num_seqs=8")
    assert p.returncode == 4, p.stderr
    assert p.stderr.splitlines() == [f"error: insufficient data: {NO_RATES}"], p.stderr


# ----------------------------------------------------------------------------- the README's example
def test_the_readmes_example_is_what_explain_prints(tmp_path: Path) -> None:
    """README.md's "What on-call sees" shows `explain --session` on the bundled session: it must
    be what explain prints today, numbers and all (it went stale once when the simulator changed;
    regenerate it by pasting the command's output between the block's fences)."""
    p = cli(tmp_path, "explain", "--session", str(DEMO))
    assert p.returncode == 0, p.stderr
    readme = (REPO / "README.md").read_text()
    start = readme.index("## What on-call sees")
    block = readme[readme.index("```text\n", start) + len("```text\n") :]
    block = block[: block.index("```")]
    assert block.rstrip("\n") == p.stdout.rstrip("\n")
