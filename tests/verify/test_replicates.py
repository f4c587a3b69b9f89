"""`compare` with more runs of each side (``--a-again``, ``--b-again``): the run-to-run noise they
measure is what a difference between A and B must pass.

The runs are the team's recordings (validation/runs/): knee-draws is one configuration on an
H100 (vLLM 0.25, cap 27, 4 GiB of KV) under follow-misconf's open load at its knee, five times
(the benchmark's seeds 0-3 and seed 0 again; docs/validation.md, item 13); follow-misconf-r4.after2
is a configuration that serves that load without a queue, on another H100 lease.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.verify.bench import BenchRun, load_bench
from advisor.verify.comparison import compare_bench_files
from advisor.verify.differences import student_t
from advisor.verify.samples import ExperimentError
from tests.paths import REPO

RUNS = REPO / "validation" / "runs"
KNEE = ("before", "seed-0-again", "seed-1", "seed-2", "seed-3")


def _run(name: str) -> BenchRun:
    return load_bench(RUNS / name / "bench.json.gz", RUNS / name / "itls_ms.json.gz")


@pytest.fixture(scope="module")
def knee() -> dict[str, BenchRun]:
    return {n: _run(f"knee-draws.{n}") for n in KNEE}


def test_student_t_quantiles_are_the_tables() -> None:
    for df, q975, q95 in ((1, 12.706, 6.314), (2, 4.303, 2.920), (5, 2.571, 2.015), (30, 2.042, 1.697)):
        assert student_t(0.975, df) == pytest.approx(q975, abs=1e-3)
        assert student_t(0.95, df) == pytest.approx(q95, abs=1e-3)


def test_at_a_knee_runs_of_one_configuration_are_judged_alike_only_with_a_replicate_each(
    knee: dict[str, BenchRun],
) -> None:
    """Nothing changed between any two of these runs. One run a side: `compare` reads a keep or
    a revert into most pairs (its bootstrap counts the requests of one burst, which queued
    together, as independent). Two runs a side: every split of the five is inconclusive."""
    one = Counter(compare_bench_files(knee[a], knee[b]).verdict for a, b in itertools.permutations(KNEE, 2))
    assert one["keep"] + one["revert"] >= 15, one
    two: Counter[str] = Counter()
    for a in itertools.combinations(KNEE, 2):
        for b in itertools.combinations([n for n in KNEE if n not in a], 2):
            c = compare_bench_files(knee[a[0]], knee[b[0]], a_again=[knee[a[1]]], b_again=[knee[b[1]]])
            two[c.verdict] += 1
    assert two == {"inconclusive": 30}, two


def test_a_real_change_passes_the_noise_the_replicates_measure(knee: dict[str, BenchRun]) -> None:
    """The five knee runs as A against a configuration that serves the load without a queue: TTFT
    p95 1.87 s -> 86 ms is beyond the noise the five measure (a factor of ~16 for TTFT p95)."""
    after = _run("follow-misconf-r4.after2")
    c = compare_bench_files(knee["before"], after, a_again=[knee[n] for n in KNEE[1:]])
    assert c.verdict == "keep", c.reasons
    assert c.reasons[0].startswith("Run-to-run noise measured from 5 of A and 1 of B")
    assert c.overall is not None and c.overall.metrics["ttft_p95"].significant
    floor = c.settings.noise_floor["ttft_p95"]
    assert 5 < floor < 1.87 / 0.086 - 1, floor  # wide, and still short of the change


def test_a_replicate_of_another_load_is_refused(knee: dict[str, BenchRun]) -> None:
    other = _run("cpu-knee-draws.before")
    with pytest.raises(ExperimentError, match=r"is not a run of .*'s load"):
        compare_bench_files(knee["before"], knee["seed-1"], a_again=[other])


def test_cli_takes_the_replicates_and_says_what_they_measured(tmp_path: Path) -> None:
    paths = {}
    for n in ("before", "seed-0-again", "seed-1", "seed-2"):
        src = RUNS / f"knee-draws.{n}"
        paths[n] = tmp_path / n / "bench.json.gz"
        paths[n].parent.mkdir()
        paths[n].write_bytes((src / "bench.json.gz").read_bytes())
        (paths[n].parent / "itls_ms.json.gz").write_bytes((src / "itls_ms.json.gz").read_bytes())
    args = ["compare", str(paths["before"]), str(paths["seed-1"])]
    r = CliRunner().invoke(
        main, [*args, "--a-again", str(paths["seed-0-again"]), "--b-again", str(paths["seed-2"])]
    )
    assert r.exit_code == 0, r.output
    assert r.output.startswith("Verdict: INCONCLUSIVE")
    assert "Run-to-run noise measured from 2 of A and 2 of B" in r.output
    r = CliRunner().invoke(
        main,
        [
            *args,
            "--a-again",
            str(paths["seed-0-again"]),
            "--b-again",
            str(paths["seed-2"]),
            "--format",
            "json",
        ],
    )
    j = json.loads(r.output)
    assert (j["a_again"], j["b_again"]) == ([str(paths["seed-0-again"])], [str(paths["seed-2"])])
    assert j["verdict"] == "inconclusive" and j["settings"]["noise_floor_pct"]["ttft_p95"] > 40
    other = RUNS / "cpu-knee-draws.before" / "bench.json.gz"
    r = CliRunner().invoke(main, [*args, "--a-again", str(other)])
    assert r.exit_code == 1 and "is not a run of" in r.output, r.output
