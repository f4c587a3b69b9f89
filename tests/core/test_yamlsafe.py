"""One safe YAML reader for every YAML input (issue 23, class 3): the advisor's config, the
engine config (`--engine-config`), rule files and the alert config refuse an alias bomb, deep
nesting, an oversized file and numbers beyond 64 bits with their own clear error, quickly and
without the memory an expansion would take. "Quickly" is asserted as work, not seconds (issue 33:
a busy machine made a 2 s CPU bound fail): the tokens the parser's scanner produced are counted,
and a deep or oversized document is refused before the scanner reads a token.

Before: a 465-byte alias bomb in `--engine-config` made `run` expand 9**9 values (RSS past
860 MiB, never listening); a 400-digit integer in an engine config became an OverflowError
wherever it was first used as a float.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from advisor.core import config, yamlsafe
from advisor.diagnose.ruleset import RuleError, default_rules_dir, load_rules
from advisor.outputs.alert_config import AlertConfigError, load_alert_config
from advisor.sources import engine_config
from tests.paths import REPO


def bomb(levels: int = 9) -> str:
    """The "billion laughs": ``levels`` anchors, each a list of nine aliases of the one before."""
    out = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        out.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return "\n".join(out) + "\n"


BIG = "9" * 400

# (name, loader of a path, the error it must raise)
LOADERS: list[tuple[str, Callable[[Path], object], type[Exception]]] = [
    ("config", lambda p: config.load(str(p), env={}), config.ConfigError),
    ("engine-config", engine_config.from_config_file, engine_config.EngineSourceError),
    ("alert-config", lambda p: load_alert_config(str(p)), AlertConfigError),
]


def _rule_dir(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "rules"
    d.mkdir(exist_ok=True)
    (d / "r.yaml").write_text(text)
    return d


CASES = {
    # the 465-byte bomb of the issue: 9**9 values once expanded
    "alias-bomb": (bomb(), "alias"),
    "deep": ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nested"),
    "int-400-digits": (f"max_num_seqs: {BIG}\n", "too large"),
    "int-5000-digits": ("max_num_seqs: " + "9" * 5000 + "\n", "too large"),
    "float-overflow": ("gpu_memory_utilization: 1.0e+400\n", "out of range"),
    "oversized": ("# padding\n" * 120_000 + "a: 1\n", "larger than"),
    "deep-block": ("".join(" " * i + f"k{i}:\n" for i in range(300)) + " " * 300 + "v\n", "nested"),
    "deep-dashes": ("- " * 3000 + "x\n", "nested"),
    # 800 KB, within the size limit: 400,000 values (composing them all took 9 s of CPU)
    "many-values": ("a: [" + "1," * 400_000 + "]\n", "values"),
}
# the most tokens the scanner may produce for each (20 for the small documents)
TOKEN_BOUND = {"alias-bomb": 400, "deep": 0, "deep-block": 0, "deep-dashes": 0, "oversized": 0}
TOKEN_BOUND |= {"many-values": 3 * yamlsafe.MAX_NODES}


@pytest.fixture
def tokens(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times the YAML scanner was asked for more tokens: the parser's work (its pure
    Python scanner is the slow part of reading YAML)."""
    count = [0]
    fetch = yaml.scanner.Scanner.fetch_more_tokens

    def counted(self: yaml.scanner.Scanner) -> None:
        count[0] += 1
        fetch(self)

    monkeypatch.setattr(yaml.scanner.Scanner, "fetch_more_tokens", counted)
    yield count


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(("name", "load", "error"), LOADERS, ids=[x[0] for x in LOADERS])
def test_every_yaml_input_refuses_hostile_documents_quickly(
    tmp_path: Path,
    tokens: list[int],
    case: str,
    name: str,
    load: Callable[[Path], object],
    error: type[Exception],
) -> None:
    text, words = CASES[case]
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    with pytest.raises(error) as e:
        load(p)
    assert tokens[0] <= TOKEN_BOUND.get(case, 20), tokens[0]
    msg = str(e.value)
    assert words in msg and "\n" not in msg and str(p) in msg, msg
    assert BIG not in msg  # the number is not echoed whole


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_rules_loader_refuses_them_with_file_and_line(
    tmp_path: Path, tokens: list[int], case: str
) -> None:
    text, words = CASES[case]
    d = _rule_dir(tmp_path, "id: r\n" + text)
    with pytest.raises(RuleError) as e:
        load_rules(d)
    assert tokens[0] <= TOKEN_BOUND.get(case, 20) + 10, tokens[0]
    joined = "\n".join(e.value.errors)
    assert words in joined and "r.yaml:" in joined, joined


def test_a_big_number_in_a_rule_threshold_is_a_rule_error(tmp_path: Path) -> None:
    """A threshold of 400 digits was an OverflowError when the rule was checked."""
    text = (default_rules_dir() / "kv-preemption-capacity.yaml").read_text()
    assert 'op: ">=", value: 0.9}' in text
    d = _rule_dir(tmp_path, text.replace('op: ">=", value: 0.9}', f'op: ">=", value: {BIG}}}', 1))
    with pytest.raises(RuleError) as e:
        load_rules(d)
    assert any("too large" in x for x in e.value.errors)


def test_the_loader_reads_what_it_should() -> None:
    """Anchors and aliases within the limits, numbers of every YAML spelling, and the bundled
    files all read as PyYAML's safe loader reads them."""
    text = "base: &b {x: 1, y: [1.5, .inf, 0x10, 1_000]}\nother: *b\nbig: 9223372036854775807\n"
    assert yamlsafe.loads(text) == yaml.safe_load(text)
    for p in [*default_rules_dir().glob("*.yaml"), REPO / "deploy" / "vllm-advisor.yaml"]:
        assert yamlsafe.load_file(p) == yaml.safe_load(p.read_text()), p
    with pytest.raises(yamlsafe.YamlError) as e:
        yamlsafe.loads("a: 1\nb: 9223372036854775808\n")
    assert e.value.line == 2


def test_libyaml_parses_and_an_error_still_names_its_line() -> None:
    """PyYAML's wheels carry libyaml: the text is scanned and parsed in C (the pure-Python
    scanner was ~85% of reading the rules), composed by PyYAML's composer, where the node budget
    is counted, and a syntax error or a control character is still one YamlError with its line
    where the parser gives one."""
    assert yamlsafe.PARSER == "libyaml"
    with pytest.raises(yamlsafe.YamlError) as e:
        yamlsafe.loads("a: 1\nb: [1, 2\nc: 3\n")
    assert e.value.line == 3 and "']'" in e.value.problem
    with pytest.raises(yamlsafe.YamlError) as e:
        yamlsafe.loads("a: 1\n  b: 2\n")
    assert e.value.line == 2
    with pytest.raises(yamlsafe.YamlError) as e:
        yamlsafe.loads("a: 1\nb: \x01\n")
    assert "#x0001" in e.value.problem
    with pytest.raises(yamlsafe.YamlError) as e:  # the composer's budget, node by node
        yamlsafe.loads("[" + ", ".join(["1"] * 50) + "]", max_nodes=20)
    assert "more than 20 values" in e.value.problem and e.value.line == 1


WITHIN_LIMITS = [
    'a: "[[[[' + "[" * 100 + '"\n',  # brackets in quoted scalars
    "a: '[[ '' [[ '\nb: \"\\\" [[\"\n",  # quotes escaped within them
    "a: |\n  " + "[" * 100 + "\n  {{{\nb: 1\n",  # in a block scalar
    "a: x" + "[" * 100 + "\n",  # in a plain scalar
    "# " + "[" * 100 + "\nb: [1, {c: [2]}]  # ]]]\n",  # in comments
    "".join(" " * i + f"k{i}:\n" for i in range(40)) + " " * 40 + "v\n",  # 40 block levels
    "- - - [x, y]\n- {a: [[[1]]]}\n",
]


@pytest.mark.parametrize("text", WITHIN_LIMITS)
def test_the_prescan_refuses_no_document_within_the_limits(text: str) -> None:
    """The pre-scan's depth is an estimate: what is not nesting (brackets in scalars and
    comments) does not count, so a document within the limits reads as PyYAML reads it."""
    assert yamlsafe.loads(text) == yaml.safe_load(text)


def test_the_prescan_counts_what_the_parser_nests() -> None:
    """At the limit it reads; one past it, in flow or block nesting, it is refused with the line."""
    at = yamlsafe.MAX_DEPTH - 1  # the mapping `a:` is one level
    assert yamlsafe.loads("a: " + "[" * at + "]" * at)
    with pytest.raises(yamlsafe.YamlError, match="nested more than 64"):
        yamlsafe.prescan("a: " + "[" * 64 + "]" * 64)
    with pytest.raises(yamlsafe.YamlError, match="nested more than 64") as e:
        yamlsafe.prescan("".join(" " * i + f"k{i}:\n" for i in range(65)))
    assert e.value.line == 65


def test_explain_with_an_engine_config_bomb_ends_at_once_and_says_why(tmp_path: Path) -> None:
    """The issue's case end to end: `explain --engine-config BOMB` exits 2 (a bad file given by
    a flag, as a bad --config) with one line naming the file (it was ignored, exit 0), within seconds and under a 1 GiB address-space limit (it expanded past 860 MiB
    before)."""
    p = tmp_path / "engine.yaml"
    p.write_text(bomb())
    assert len(p.read_bytes()) < 600
    session = REPO / "advisor" / "data" / "sessions" / "h200-A_s256"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))

    cmd = [sys.executable, "-m", "advisor.cli", "explain", "--session", str(session)]
    res = subprocess.run(
        [*cmd, "--engine-config", str(p)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit,
        cwd=REPO,
    )
    assert res.returncode == 2, res.stdout[-500:] + res.stderr[-2000:]
    assert "alias" in res.stderr and str(p) in res.stderr and "Traceback" not in res.stderr
