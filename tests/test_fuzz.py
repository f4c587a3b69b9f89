"""Fuzzing (hypothesis) over the parsers of outside input: vLLM log lines, rule files, `vllm
bench` results (compare) and the advisor's own config. Whatever the input, only the project's
own clear errors come out (RuleError, ExperimentError, ConfigError), never a traceback, and
nothing hangs (an alias "billion laughs" tree, deeply nested JSON, a long run of spaces).

Inputs are seeded from real files in tests/fixtures (a real vLLM log, a real bench result, the
bundled rules) and mutated; the examples are derandomized so CI sees the same ones every time.
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from advisor.core import config
from advisor.core.redact import redact_argv, redact_obj, redact_text
from advisor.diagnose.ruleset import RuleError, default_rules_dir, load_rules
from advisor.sources import cmdline, logs, logwrap
from advisor.verify.bench import load_bench
from advisor.verify.samples import ExperimentError
from tests.fuzzing import fuzz, mutated

FIXTURES = Path(__file__).parent / "fixtures"
LOG_LINES = [
    ln
    for ln in (FIXTURES / "logs" / "cpu-0.32-preempt_mns16.log").read_text(errors="replace").splitlines()
    if ln.strip()
][:400]
RULE_TEXTS = [p.read_text() for p in sorted(default_rules_dir().glob("*.yaml"))]
BENCH = json.loads((FIXTURES / "sessions" / "cpu-healthy" / "bench.json").read_text())
# FUZZ_EXAMPLES=5000 FUZZ_RANDOM=1 for a deeper local run (tests/fuzzing.py)
FUZZ = fuzz(150)

yaml_values = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


# ------------------------------------------------------------------ the log line parser


@FUZZ
@given(st.one_of(mutated(LOG_LINES), st.text(max_size=300)))
def test_log_line_parser_never_raises(line: str) -> None:
    ev = logs.parse_line(line)
    assert (
        ev.kind in ("engine_stats", "startup", "error", "unknown", "request", "iteration", "preemption")
        or ev.kind
    )
    joiner = logwrap.LineJoiner()
    for joined in [*joiner.feed(line), *joiner.flush()]:
        logs.parse_line(joined)


@pytest.mark.parametrize(
    "line",
    [
        "INFO 11-30 10:00:00 [api_server.py:1] ▄▄ █ model a" + " " * 65000 + "b",
        "INFO 11-30 10:00:00 [loggers.py:1] Engine 000: Avg prompt throughput:" + " " * 65000 + "x",
        "Iteration(1): " + "1" * 65000,
        "INFO 11-30 10:00:00 [x.py:1] █ version 1.2" + " " * 65000 + "x",
    ],
)
def test_a_64kb_banner_line_with_long_runs_of_spaces_is_read(line: str) -> None:
    """These took 2-16 s each in a backtracking pattern; linear now. The CPU time is measured by
    scripts/bench_hostile.py (its "pathological lines" rows), not asserted here."""
    assert logs.parse_line(line) is not None


# ------------------------------------------------------------------ the rules loader


@FUZZ
@given(st.one_of(mutated(RULE_TEXTS), st.text(max_size=300)))
def test_rules_loader_only_raises_rule_errors(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    d = tmp_path_factory.mktemp("rules")
    (d / "r.yaml").write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_rules(d)
    except RuleError as e:
        assert e.errors and all(isinstance(x, str) and x for x in e.errors)


RULE_DOCS = [yaml.safe_load(t) for t in RULE_TEXTS]
TOP_KEYS = ["version", "id", "summary", "severity", "priority", "when", "for", "gate", "knob", "explain"]
TOP_KEYS += ["examples", "aliases", "category"]


def _paths(obj: Any, pre: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [pre]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*pre, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*pre, i))
    return out


@st.composite
def mutated_rule_docs(draw: Any) -> str:
    """A bundled rule with values anywhere in it replaced by arbitrary YAML values (wrong
    types, lists where a name goes, ...): the shape of mistakes a person makes."""
    import copy

    doc = copy.deepcopy(draw(st.sampled_from(RULE_DOCS)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)[1:] + [(k,) for k in TOP_KEYS]))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if isinstance(parent, dict) and draw(st.booleans()) and path[-1] in parent:
            del parent[path[-1]]
        elif isinstance(parent, dict | list):
            parent[path[-1]] = draw(yaml_values)
    return yaml.safe_dump(doc)


@FUZZ
@given(mutated_rule_docs())
def test_rules_loader_only_raises_rule_errors_on_wrong_types(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    d = tmp_path_factory.mktemp("rules")
    ident = yaml.safe_load(text).get("id") if isinstance(yaml.safe_load(text), dict) else None
    name = ident if isinstance(ident, str) and ident.replace("-", "").isalnum() else "r"
    (d / f"{name}.yaml").write_text(text)
    try:
        load_rules(d)
    except RuleError as e:
        assert e.errors and all(isinstance(x, str) and x for x in e.errors)


def test_rules_loader_refuses_a_billion_laughs(tmp_path: Path) -> None:
    levels = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        levels.append(f"a{i}: &a{i} [{refs}]")
    (tmp_path / "bomb.yaml").write_text("\n".join(levels) + "\nid: bomb\nwhen: *a9\n")
    # refused before the aliases are expanded (core/yamlsafe's pre-scan; tests/core/test_yamlsafe.py
    # counts the parser's calls); its CPU time is in scripts/bench_hostile.py
    with pytest.raises(RuleError) as e:
        load_rules(tmp_path)
    assert "aliases are expanded" in "\n".join(e.value.errors)


def test_rules_loader_refuses_binary_and_deep_nesting(tmp_path: Path) -> None:
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "deep.yaml").write_text("id: deep\nwhen: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(RuleError) as e:
        load_rules(tmp_path)
    text = "\n".join(e.value.errors)
    assert "bin.yaml:1: not UTF-8" in text and "deep.yaml" in text


# ------------------------------------------------------------------ compare's bench reader

json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


@st.composite
def bench_docs(draw: Any) -> Any:
    """A real bench result with some fields dropped or replaced by arbitrary JSON."""
    doc = dict(BENCH)
    for key in draw(st.lists(st.sampled_from(sorted(doc)), max_size=6)):
        if draw(st.booleans()):
            doc.pop(key, None)
        else:
            doc[key] = draw(json_values)
    return draw(st.one_of(st.just(doc), json_values))


@FUZZ
@given(bench_docs())
def test_bench_reader_only_raises_experiment_errors(
    tmp_path_factory: pytest.TempPathFactory, doc: Any
) -> None:
    p = tmp_path_factory.mktemp("bench") / "bench.json"
    p.write_text(json.dumps(doc))
    try:
        load_bench(p)
    except ExperimentError as e:
        assert str(e)


@pytest.mark.parametrize("depth", [10_000, 200_000])
def test_bench_reader_refuses_deeply_nested_json(tmp_path: Path, depth: int) -> None:
    p = tmp_path / "bench.json"
    p.write_text("[" * depth + "]" * depth)
    with pytest.raises(ExperimentError):
        load_bench(p)
    p.write_text('{"ttfts": ' + "[" * depth + "]" * depth + "}")
    with pytest.raises(ExperimentError):
        load_bench(p)


# ------------------------------------------------------------------ the config loader

CONFIG_SEED = (Path(__file__).parents[1] / "deploy" / "vllm-advisor.yaml").read_text()
settings_names = st.sampled_from(
    [
        "interval",
        "scrape_timeout",
        "listen",
        "state_dir",
        "vllm_url",
        "min_requests",
        "targets",
        "window",
        "severity_overrides",
        "vllm_port",
        "log_cmd",
        "bogus",
        "host_gpus",
        "warmup",
        "interval_s",
    ]
)


@FUZZ
@given(
    st.one_of(
        mutated([CONFIG_SEED]),
        st.dictionaries(settings_names, yaml_values, max_size=4).map(lambda d: yaml.safe_dump(d)),
        st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    )
)
def test_config_loader_only_raises_config_errors(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    p = tmp_path_factory.mktemp("cfg") / "c.yaml"
    p.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        cfg = config.load(str(p), env={})
    except config.ConfigError as e:
        msg = str(e)
        assert msg and "\n" not in msg and "Traceback" not in msg
        return
    # what loads is usable: the daemon can start from it
    assert cfg.interval_s > 0 and cfg.scrape_timeout_s > 0 and cfg.state_dir
    config.parse_listen(cfg.listen)


@FUZZ
@given(st.dictionaries(settings_names, st.text(max_size=12), max_size=3))
def test_config_from_environment_and_flags_only_raises_config_errors(values: dict[str, str]) -> None:
    env = {"VLLM_ADVISOR_" + k.upper(): v for k, v in values.items()}
    for source in ({"env": env}, {"env": {}, **values}):
        try:
            config.load(None, **source)  # type: ignore[arg-type]
        except config.ConfigError as e:
            assert str(e) and "\n" not in str(e)


# ------------------------------------------------------------------ redaction contexts

_SECRET_CHARS = string.ascii_letters + string.digits + "._~+/=-"
_KV_NAMES = [
    "api_key",
    "API_KEY",
    "apiKey",
    "token",
    "access_token",
    "hf_token",
    "HF_TOKEN",
    "OPENAI_API_KEY",
    "password",
    "db_password",
    "x-api-key",
    "client_secret",
    "auth_token",
]
_WRAPS = [
    "{}",
    "error: {}",
    "ERROR 12-02 17:00:00 [api_server.py:1] request failed: {}",
    "WARNING scrape of {} failed",
    "non-default args: {{'model': 'm', 'x': {}}}",
    "url: {} (timeout)",
    "({})",
    "[{}]",
    "cannot connect to {}, retrying",
    '"{}"',
]


def _abbreviations() -> list[str]:
    out = []
    for flag in ("api-key", "hf-token"):
        for n in range(2, len(flag) + 1):
            out += [flag[:n], flag[:n].replace("-", "_")]
    return out


_FLAG_SPELLINGS = _abbreviations()


def _context(rng: random.Random, secret: str) -> tuple[str, str, str]:
    """A kind of context, a text holding the secret in it, and the secret (as it was put)."""
    kind = rng.choice(["kv", "query", "userinfo", "password", "header", "flag", "literal"])
    host = rng.choice(["h", "10.0.0.7:8000", "vllm.internal:443", "[::1]:9090"])
    scheme = rng.choice(["http", "https", "HTTP", "git+https"])
    if kind == "kv":
        name = rng.choice(_KV_NAMES)
        q = rng.choice(["", "'", '"'])
        sep = rng.choice(["=", ": ", ":", " = "])
        inner = f"{q}{name}{q}{sep}{q}{secret}{q}"
    elif kind == "query":
        qname = rng.choice(["token", "access_token", "api_key", "apikey", "auth_token", "hf_token"])
        before = rng.choice(["", "a=1&", "match[]=up&x=y&"])
        after = rng.choice(["", "&b=2", "#frag", "&c=3#f"])
        inner = (
            f"{scheme}://{host}/{rng.choice(['', 'metrics', 'api/v1/query'])}?{before}{qname}={secret}{after}"
        )
    elif kind == "userinfo":
        secret = secret.replace("/", "_")
        inner = f"{scheme}://{secret}@{host}/{rng.choice(['', 'metrics'])}"
    elif kind == "password":
        secret = secret.replace("/", "_")
        inner = f"{scheme}://{rng.choice(['u', 'advisor', 'a.b'])}:{secret}@{host}/metrics"
    elif kind == "header":
        head = rng.choice(["Authorization", "authorization", "Proxy-Authorization"])
        form = rng.choice(["{h}: {s} {v}", "'{h}': '{s} {v}'", '"{h}": "{s} {v}"'])
        cred = rng.choice(["Basic", "Bearer", "Token", "Digest response="])
        inner = form.format(h=head, s=cred, v=secret)
        if rng.random() < 0.3:
            inner = f"{rng.choice(['Cookie', 'Set-Cookie'])}: sid={secret}; theme=dark"
    elif kind == "flag":
        inner = f"--{rng.choice(_FLAG_SPELLINGS)}{rng.choice(['=', ' '])}{secret}"
        if rng.random() < 0.5:
            inner = f"vllm serve m {inner} --max-num-seqs 8"
    else:
        secret = rng.choice(["hf_", "sk-", "ghp_"]) + "".join(c for c in secret if c.isalnum()).ljust(24, "x")
        inner = f"using {secret} now"
    return kind, inner, secret


def test_no_secret_survives_redaction_in_generated_contexts() -> None:
    """3,000 generated lines (fixed seed): a secret in key=value / key: value forms (quoted or
    not, inside another value), URL queries, userinfo with and without a password,
    Authorization and Cookie headers, every abbreviation of vLLM's secret flags, literal tokens;
    each line wrapped in a log line, an error, a repr. No secret is left by redact_text,
    redact_obj or redact_argv, and a second pass changes nothing."""
    rng = random.Random(34)
    leaks: list[str] = []
    kinds: dict[str, int] = {}
    for _ in range(3000):
        secret = "S3" + "".join(rng.choice(_SECRET_CHARS) for _ in range(rng.randint(6, 40))) + "Q"
        if rng.random() < 0.5:  # where a URL's userinfo can hold it
            secret = secret.replace("/", "_")
        kind, inner, secret = _context(rng, secret)
        line = rng.choice(_WRAPS).format(inner)
        kinds[kind] = kinds.get(kind, 0) + 1
        once = redact_text(line)
        seen = [
            once,
            json.dumps(redact_obj({"msg": line})),
            # a command line: the context split into words (a key: value or a header as one word)
            " ".join(redact_argv(inner.split() if kind not in ("kv", "header") else [inner])),
        ]
        if any(secret in s for s in seen) or redact_text(once) != once:
            leaks.append(f"{kind}: {line!r} -> {once!r}")
    assert not leaks, f"{len(leaks)} leaks, e.g. {leaks[:5]}"
    assert len(kinds) == 7 and min(kinds.values()) > 300


def test_no_abbreviated_secret_flag_reaches_the_read_command() -> None:
    """Every abbreviation of --api-key/--hf-token, in a live argv and in a pasted command:
    neither the facts nor the argv as shown hold the value."""
    for spelled in _FLAG_SPELLINGS:
        for form in (["--" + spelled, "SECRETX"], ["--" + spelled + "=SECRETX"]):
            argv = ["vllm", "serve", "m", *form, "--max-num-seqs", "8"]
            assert "SECRETX" not in repr(cmdline.from_cmdline(argv, read_config=False)), argv
            pasted = cmdline.read_command(" ".join(argv))
            assert "SECRETX" not in repr(pasted), argv


@pytest.mark.parametrize(
    "line",
    ["a:" * 32000, "a=" * 32000, "http://" * 9000, "note: note: " * 5000],
    ids=["colons", "equals", "urls", "notes"],
)
def test_redacting_a_64kb_line_of_nested_keys_is_not_a_hang(line: str) -> None:
    """A value is read only after a secret name: these took 2-7 s when every key's value was
    scanned to the line's end and then scanned again. The CPU time is measured by
    scripts/bench_hostile.py, not asserted here."""
    assert redact_text(line) == line
