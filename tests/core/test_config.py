"""Config validation (issue 17): every setting from the YAML file, the environment or a flag
is checked, and a bad one is one line naming the setting, where it came from and what is
expected."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.core import config
from advisor.core.config import ConfigError
from advisor.diagnose import ruleset
from tests.paths import REPO


def load_yaml(tmp_path: Path, text: str | bytes) -> config.Config:
    p = tmp_path / "advisor.yaml"
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return config.load(str(p), env={})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("interval: -5\n", "advisor.yaml:1: interval: must be greater than 0"),
        (
            "vllm_url: http://x:1\nscrape_timeout: 0\n",
            "advisor.yaml:2: scrape_timeout: must be greater than 0",
        ),
        (
            "listen: notaport\n",
            "advisor.yaml:1: listen: expected HOST:PORT such as 127.0.0.1:19842, got 'notaport'",
        ),
        ("listen: 127.0.0.1:99999\n", "advisor.yaml:1: listen: port 99999 is out of range (0-65535)"),
        (
            "listen: 19990\n",
            "listen: expected HOST:PORT such as 127.0.0.1:19842, got the number 19990 (quote it",
        ),
        ("state_dir: null\n", "advisor.yaml:1: state_dir: expected a directory path, got null"),
        ("intervall: 5s\n", "advisor.yaml:1: 'intervall': unknown setting (did you mean interval?)"),
        ("no_such_thing: 5s\n", "advisor.yaml:1: 'no_such_thing': unknown setting (known: vllm_url,"),
        ("interval: [1, 2]\n", "interval: expected a duration (e.g. 5s, 500ms, 2m), got a list"),
        ("interval: true\n", "interval: expected a duration (e.g. 5s, 500ms, 2m), got the boolean true"),
        ("interval: 10ms\n", "interval: must be at least 0.1s"),
        ("min_requests: 2.5\n", "min_requests: expected a whole number from 0 to"),
        ("vllm_port: 70000\n", "vllm_port: expected a whole number from 1 to 65535, got 70000"),
        ("vllm_url: ftp://host\n", "vllm_url: expected an http(s) URL such as http://127.0.0.1:8000"),
        (
            "targets: {ttft_p95_seconds: -1}\n",
            "targets: ttft_p95_seconds: expected a number of seconds greater than 0",
        ),
        ("severity_overrides: {a: loud}\n", "severity_overrides: a: expected one of critical, warning, info"),
        ("log_cmd: ''\n", "log_cmd: expected a command line, got an empty value"),
        ("replicas_headroom: 0.8\n", "replicas_headroom: expected a number from 1 to 10, got 0.8"),
        ("replicas_headroom: lots\n", "replicas_headroom: expected a number from 1 to 10, got 'lots'"),
        ("scale_in_hold: -1m\n", "scale_in_hold: must be greater than 0 (e.g. 5s), got '-1m'"),
        ("- interval\n", "advisor.yaml: must be a mapping of settings (setting: value), not a list"),
        ("interval: 5s\ninterval: 6s\n", "advisor.yaml:2: interval: given twice"),
        ("interval: [\n", "advisor.yaml: not valid YAML: line 2:"),
        ("a: &a [*a]\n", "advisor.yaml: not valid YAML"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00", "advisor.yaml: a binary file, not YAML"),
        (b"interval: \xff\xfe\n", "advisor.yaml: not UTF-8 text (byte 10)"),
    ],
)
def test_bad_settings_in_the_file_are_one_clear_line(tmp_path: Path, text: str | bytes, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_yaml(tmp_path, text)
    msg = str(e.value)
    assert message in msg
    assert "\n" not in msg


def test_environment_and_flags_are_named_in_the_message() -> None:
    with pytest.raises(
        ConfigError, match=r"^environment variable VLLM_ADVISOR_INTERVAL: interval: must be greater"
    ):
        config.load(None, env={"VLLM_ADVISOR_INTERVAL": "-5"})
    with pytest.raises(ConfigError, match=r"^environment variable VLLM_ADVISOR_LISTEN: listen: port 99999"):
        config.load(None, env={"VLLM_ADVISOR_LISTEN": "0.0.0.0:99999"})
    with pytest.raises(
        ConfigError, match=r"^environment variable VLLM_ADVISOR_MIN_REQUESTS: min_requests: expected"
    ):
        config.load(None, env={"VLLM_ADVISOR_MIN_REQUESTS": "many"})
    with pytest.raises(ConfigError, match=r"^flag --interval: must be greater than 0"):
        config.load(None, env={}, interval="0s")
    with pytest.raises(ConfigError, match=r"^flag --state-dir: expected a directory path"):
        config.load(None, env={}, state_dir="  ")


def test_good_settings_load_from_every_source_last_wins(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("interval: 10s\nlisten: '0.0.0.0:19990'\nmin_requests: 3\ntargets: {ttft_p95_seconds: 1}\n")
    cfg = config.load(
        str(p), env={"VLLM_ADVISOR_INTERVAL": "7s", "VLLM_ADVISOR_VLLM_PORT": "8001"}, interval="3s"
    )
    assert cfg.interval_s == 3.0 and cfg.listen == "0.0.0.0:19990" and cfg.min_requests == 3
    assert cfg.vllm_port == 8001 and cfg.targets == {"ttft_p95_seconds": 1.0}
    assert config.load(None, env={}).interval_s == 5.0
    assert load_yaml(tmp_path, "").interval_s == 5.0  # an empty file: the defaults


def test_the_bundled_example_config_loads() -> None:
    example = REPO / "deploy" / "vllm-advisor.yaml"
    cfg = config.load(str(example), env={})
    assert cfg.interval_s == 5.0 and cfg.state_dir == "/var/lib/vllm-advisor"
    assert (cfg.replicas_headroom, cfg.scale_in_hold_s) == (1.2, 300.0)


def test_replica_settings_from_the_environment() -> None:
    cfg = config.load(None, env={"VLLM_ADVISOR_REPLICAS_HEADROOM": "1.5", "VLLM_ADVISOR_SCALE_IN_HOLD": "2m"})
    assert (cfg.replicas_headroom, cfg.scale_in_hold_s) == (1.5, 120.0)
    with pytest.raises(ConfigError, match=r"^environment variable VLLM_ADVISOR_REPLICAS_HEADROOM: replicas"):
        config.load(None, env={"VLLM_ADVISOR_REPLICAS_HEADROOM": "nan"})


@pytest.mark.parametrize("listen", ["127.0.0.1:0", "[::1]:19842", ":8080", "0.0.0.0:65535"])
def test_listen_forms_that_are_valid(listen: str) -> None:
    host, port = config.parse_listen(listen)
    assert 0 <= port <= 65535 and host


# ---------------------------------------------------------------------- settings checked together
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "interval: 60s\n",
            "advisor.yaml:1) is longer than stale_after 30s (default): advice would be "
            "withdrawn as stale between two scrapes",
        ),
        ("interval: 3m\nstale_after: 10m\n", "advisor.yaml:1) is longer than window 2m (default)"),
        ("window: 20m\n", "retention 15m (default) is shorter than window 20m ("),
        ("retention: 1m\n", "advisor.yaml:1) is shorter than window 2m (default)"),
        ("interval: 720h\n", "advisor.yaml:1: interval: must be at most 1h"),
        ("scrape_timeout: 2h\n", "advisor.yaml:1: scrape_timeout: must be at most 10m"),
        ("window: 48h\n", "advisor.yaml:1: window: must be at most 24h"),
    ],
)
def test_settings_that_contradict_each_other_are_one_clear_line(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as e:
        load_yaml(tmp_path, text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_contradiction_names_the_flag_or_variable_that_made_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"interval 45s \(flag --interval\) is longer than stale_after 30s"):
        config.load(None, env={}, interval="45s")
    with pytest.raises(
        ConfigError, match=r"stale_after 2s \(environment variable VLLM_ADVISOR_STALE_AFTER\)"
    ):
        config.load(None, env={"VLLM_ADVISOR_STALE_AFTER": "2s"})
    cfg = config.load(None, env={"VLLM_ADVISOR_STALE_AFTER": "2m"}, interval="45s")
    assert cfg.interval_s == 45.0


def test_run_refuses_contradicting_settings_as_a_usage_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["run", "--interval", "5m", "--state-dir", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: config: interval 5m (flag --interval) is longer than")


TARGETS_AND_OVERRIDES = """\
interval: 5s
targets:
  ttft_p95_seconds: 2
  itl_p95_seconds: 0.1
  ttft_p95_seconds: 3
  ttft_p59_seconds: 1
  e2e_p95_seconds: 4
severity_overrides:
  kv-preemption-capacity: critical
  kv-preemption-capacit: info
  no-such-rule: warning
  kv-preemption-capacity: info
"""


def test_duplicate_and_unknown_targets_are_named_at_their_own_lines(tmp_path: Path) -> None:
    """Issue 34, G16: under ``targets:`` a key given twice (YAML keeps the last one silently) and
    a name no rule or prediction reads are each a line naming file:line (before: both passed,
    the second value winning and the unknown target doing nothing)."""
    with pytest.raises(ConfigError) as e:
        load_yaml(tmp_path, TARGETS_AND_OVERRIDES)
    f = tmp_path / "advisor.yaml"
    problems = e.value.problems
    assert f"{f}:5: targets: ttft_p95_seconds: given twice (first at line 3)" in problems, problems
    assert f"{f}:6: targets: ttft_p59_seconds: unknown target (did you mean ttft_p95_seconds?)" in problems
    assert (
        f"{f}:7: targets: e2e_p95_seconds: unknown target (known: ttft_p95_seconds, itl_p95_seconds)"
        in problems
    )
    assert f"{f}:12: severity_overrides: kv-preemption-capacity: given twice (first at line 9)" in problems


def _rule_ids(rules_dir: str | None) -> dict[str, str] | None:
    return ruleset.rule_ids(rules_dir)


def test_unknown_rule_ids_in_severity_overrides_are_named_and_refused_at_load(tmp_path: Path) -> None:
    """G16: an override of a rule that does not exist would silently change nothing: named at its
    line with the nearest id, by ``load`` (the daemon's start: exit 2) and ``config check``;
    a former id (an alias of a renamed rule) names the id to write."""
    p = tmp_path / "advisor.yaml"
    p.write_text(
        "severity_overrides:\n  kv-preemption-capacity: critical\n  kv-preemption-capacit: info\n"
        "  no-such-rule: warning\n"
    )
    with pytest.raises(ConfigError) as e:
        config.load(str(p), env={}, rule_ids=_rule_ids)
    assert list(e.value.problems[:1]) == [
        f"{p}:3: severity_overrides: kv-preemption-capacit: no rule has this id "
        "(did you mean kv-preemption-capacity?)"
    ]
    assert e.value.problems[1].startswith(
        f"{p}:4: severity_overrides: no-such-rule: no rule has this id (known: "
    )
    assert "frontend-cpu-bound" in e.value.problems[1] and "kv-preemption-capacity" in e.value.problems[1]
    assert len(e.value.problems) == 2
    res = CliRunner().invoke(main, ["config", "check", str(p)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 2 and f"{p}:3:" in lines[0] and f"{p}:4:" in lines[1]
    res = CliRunner().invoke(main, ["run", "--config", str(p), "--state-dir", str(tmp_path / "s")])
    assert res.exit_code == 2 and res.output.startswith(f"error: config: {p}:3: severity_overrides:")
    # a renamed rule's former id
    rules = tmp_path / "rules"
    rules.mkdir()
    for src in (REPO / "rules").glob("*.yaml"):
        text = src.read_text()
        if src.stem == "kv-preemption-capacity":
            text = text.replace(
                "id: kv-preemption-capacity\n", "id: kv-preemption-capacity\naliases: [kv-cache-preemption]\n"
            )
        (rules / src.name).write_text(text)
    p.write_text(f"rules_dir: {rules}\nseverity_overrides:\n  kv-cache-preemption: critical\n")
    with pytest.raises(ConfigError) as e:
        config.load(str(p), env={}, rule_ids=_rule_ids)
    assert e.value.problems == (
        f"{p}:3: severity_overrides: kv-cache-preemption: a former id of rule kv-preemption-capacity; "
        "write kv-preemption-capacity",
    )
    p.write_text("severity_overrides:\n  kv-preemption-capacity: critical\n")
    assert config.load(str(p), env={}, rule_ids=_rule_ids).severity_overrides == {
        "kv-preemption-capacity": "critical"
    }
