"""The symptom table: every rule's examples run as named tests, docs are enforced,
invalid rules are reported all at once with file:line, and arbitration picks one knob."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.core import knobs
from advisor.core.config import Config
from advisor.diagnose.advise import provenanced_engine
from advisor.diagnose.arbitration import arbitrate, building, resolve_choice
from advisor.diagnose.evaluate import Evaluator, Finding, conditions_hold
from advisor.diagnose.ruleset import DOC_SECTIONS, RuleError, load_rules

RULES = load_rules()
CFG = Config()


def _examples(kind: str) -> list[tuple[str, dict[str, float]]]:
    return [(f"{r.id}-{kind}-{i}", ex) for r in RULES for i, ex in enumerate(r.examples[kind])]


def _split(example: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """An example's signal values, and the knob values among them (what the engine runs with)."""
    return example, {k: v for k, v in example.items() if k in knobs.KNOBS}


@pytest.mark.parametrize(
    ("name", "example"), _examples("fires"), ids=lambda x: x if isinstance(x, str) else ""
)
def test_rule_example_fires_and_proposes_a_concrete_value(name: str, example: dict[str, float]) -> None:
    rule = next(r for r in RULES if name.startswith(r.id + "-fires"))
    values, engine_values = _split(example)
    holds, checks, _ = conditions_hold(rule, values)
    assert holds is True, [c.to_json() for c in checks]
    engine = provenanced_engine(engine_values)
    choice, current, proposed, _, why_not = resolve_choice(
        rule, values, engine, CFG.with_overrides(host_gpus=8)
    )
    assert choice is not None, why_not
    if choice.name != "replicas" and choice.direction in ("increase", "decrease"):
        assert proposed is not None and current is not None and proposed != current
        # a knob's "no limit" value (long_prefill_token_threshold 0) is above every limit
        unlimited = knobs.KNOBS[choice.name].unlimited_at
        cur = float("inf") if unlimited is not None and current == unlimited else current
        assert (proposed > cur) == (choice.direction == "increase")


@pytest.mark.parametrize(
    ("name", "example"), _examples("quiet"), ids=lambda x: x if isinstance(x, str) else ""
)
def test_rule_example_stays_quiet(name: str, example: dict[str, float]) -> None:
    rule = next(r for r in RULES if name.startswith(r.id + "-quiet"))
    holds, _, _ = conditions_hold(rule, example)
    assert holds is False


def test_every_rule_carries_its_docs() -> None:
    assert len(RULES) >= 10
    for r in RULES:
        for section in DOC_SECTIONS:
            assert r.explain.get(section), f"{r.id}: {section}"
        assert r.examples["fires"] and r.examples["quiet"]
        assert r.alert.startswith("Vllm")


def test_the_tuning_guide_rows_are_covered() -> None:
    pairs = {(k.name, k.direction) for r in RULES for k in r.knobs}
    for need in [
        ("max_num_seqs", "decrease"),
        ("max_num_seqs", "increase"),
        ("gpu_memory_utilization", "increase"),
        ("tensor_parallel_size", "increase"),
        ("pipeline_parallel_size", "increase"),
        ("max_num_batched_tokens", "increase"),
        ("max_num_batched_tokens", "decrease"),
        ("max_model_len", "decrease"),
        ("api_server_count", "increase"),
        ("mm_processor_cache_gb", "set"),
        ("mm_processor_cache_type", "set"),
        ("data_parallel_size", "increase"),
    ]:
        assert need in pairs, need


def test_invalid_rules_report_every_error_with_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "bad-one.yaml").write_text(
        "version: advisor/v1\n"
        "id: bad-one\n"
        "summary: A rule.\n"
        "severity: urgent\n"  # line 4: bad severity
        "when:\n"
        "  - {signal: no_such_signal, op: '>', value: 1}\n"  # line 6
        "knob:\n"
        "  - {name: max_num_seqs, direction: sideways}\n"  # line 8
        "  - name: data_parallel_size\n"
        "    direction: increase\n"
        "    unless: [{signal: no_such_weight, op: '>=', value: 1}]\n"  # line 11
        "explain: {what: x}\n"
        "examples: {fires: [{}], quiet: [{}]}\n"
    )
    (tmp_path / "wrong-name.yaml").write_text("version: advisor/v1\nid: other-name\n")
    (tmp_path / "broken.yaml").write_text("id: [unclosed\n")
    with pytest.raises(RuleError) as e:
        load_rules(tmp_path)
    errs = "\n".join(e.value.errors)
    assert f"{tmp_path}/bad-one.yaml:4: severity" in errs
    assert f"{tmp_path}/bad-one.yaml:6: when: unknown signal 'no_such_signal'" in errs
    assert f"{tmp_path}/bad-one.yaml:8: knob: direction" in errs
    assert f"{tmp_path}/bad-one.yaml:11: knob.unless: unknown signal 'no_such_weight'" in errs
    assert "missing section 'why'" in errs
    assert f"{tmp_path}/wrong-name.yaml:2: id: must equal the file name" in errs
    assert f"{tmp_path}/broken.yaml:" in errs and "invalid YAML" in errs
    # the CLI prints all of them and fails
    res = CliRunner().invoke(main, ["rules", "check", str(tmp_path)])
    assert res.exit_code == 1
    assert "bad-one.yaml:4" in res.output and "broken.yaml" in res.output and "error(s)" in res.output


def test_rules_check_on_the_bundled_rules() -> None:
    res = CliRunner().invoke(main, ["rules", "check"])
    assert res.exit_code == 0 and f"{len(RULES)} rules OK" in res.output


def _firing(values: dict[str, float]) -> list:
    ev = Evaluator(RULES)
    ev.honor_for = False
    return [f for f in ev.evaluate(values, 0) if f.state == "firing"]


BASE = {
    "preemptions_per_second": 0.0,
    "kv_cache_usage_ratio_max": 0.5,
    "running_to_max_num_seqs_ratio": 0.5,
    "preemption_recompute_ratio": 0.0,
    "requests_waiting_avg": 0.0,
    "waiting_to_running_ratio": 0.0,
    "max_num_seqs": 256.0,
    "max_num_batched_tokens": 8192.0,
    "kv_capacity_requests_at_max_len": 10.0,
}


def test_arbitration_never_raises_max_num_seqs_while_preempting() -> None:
    """queue-seqs-cap-binds cannot fire while preempting by its own conditions, and even a rule
    set that lets it (a condition dropped) is overruled by the arbitration's prerequisite."""
    values = {
        **BASE,
        "preemptions_per_second": 1.0,
        "kv_cache_usage_ratio_max": 1.0,
        "running_to_max_num_seqs_ratio": 1.0,
        "preemption_recompute_ratio": 0.5,
        "requests_waiting_avg": 20.0,
        "kv_sustained_concurrency": 100.0,
    }
    firing = _firing(values)
    assert [f.rule.id for f in firing] == ["kv-preemption-seqs-bind"]
    # force the increase rule to "fire" too: the prerequisite suppresses it
    seqs_up = next(r for r in RULES if r.id == "queue-seqs-cap-binds")
    forced = [*firing, type(firing[0])(seqs_up, "firing", ())]
    engine = provenanced_engine(
        {"max_num_seqs": 256, "gpu_memory_utilization": 0.95, "kv_cache_dtype": "fp8"}
    )
    status, _, best, fjson = arbitrate(forced, values, engine, CFG)
    assert status == "advice" and best is not None
    # no memory left to give (0.95) and the KV cache already fp8: the cap comes down, to what
    # the KV cache holds
    assert (best.choice.name, best.choice.direction, best.proposed) == ("max_num_seqs", "decrease", 100)
    assert any(f.get("suppressed") for f in fjson if f["rule"] == "queue-seqs-cap-binds")


def test_cap_binding_with_a_full_cache_asks_for_memory_before_a_lower_cap() -> None:
    """H200 ground truth (docs/validation.md): cutting max_num_seqs 48 -> 36 to stop preemption
    cost 30% of the throughput; more KV memory under the same load gained 21%."""
    values = {
        **BASE,
        "preemptions_per_second": 1.0,
        "kv_cache_usage_ratio_max": 1.0,
        "running_to_max_num_seqs_ratio": 1.0,
        "preemption_recompute_ratio": 0.5,
        "kv_sustained_concurrency": 42.0,
    }
    firing = _firing(values)
    engine = provenanced_engine({"max_num_seqs": 48, "gpu_memory_utilization": 0.9})
    _, _, best, _ = arbitrate(firing, values, engine, CFG)
    assert best is not None
    assert (best.choice.name, best.choice.direction, best.proposed) == (
        "gpu_memory_utilization",
        "increase",
        0.95,
    )
    engine = provenanced_engine({"max_num_seqs": 48, "gpu_memory_utilization": 0.95})
    _, _, best, _ = arbitrate(firing, values, engine, CFG)
    assert best is not None  # memory cannot grow and no GPU to add: the fp8 KV cache
    assert (best.choice.name, best.proposed) == ("kv_cache_dtype", "fp8")
    engine = provenanced_engine({"max_num_seqs": 48, "gpu_memory_utilization": 0.95, "kv_cache_dtype": "fp8"})
    _, _, best, _ = arbitrate(firing, values, engine, CFG)
    assert best is not None  # never below what the cache holds (42), unlike the old 25% cut (36)
    assert (best.choice.name, best.choice.direction, best.proposed) == ("max_num_seqs", "decrease", 42)


def test_arbitration_prefers_severity_then_priority_then_id() -> None:
    values = {
        **BASE,
        "kv_capacity_requests_at_max_len": 1.5,
        "max_model_len": 8192.0,
        "itl_seconds_p95": 0.3,
        "itl_tail_ratio": 10.0,
        "prompt_tokens_per_generation_token": 20.0,
    }
    firing = _firing(values)
    ids = sorted(f.rule.id for f in firing)
    assert ids == ["itl-stutter-prefill-chunks", "kv-capacity-below-context"]
    engine = provenanced_engine({"max_num_batched_tokens": 8192, "max_model_len": 8192})
    status, _, best, _ = arbitrate(firing, values, engine, CFG)
    assert status == "advice" and best is not None
    assert best.finding.rule.id == "itl-stutter-prefill-chunks"  # warning beats info
    assert best.proposed == 4096


def test_opposite_directions_on_one_knob_are_inconclusive() -> None:
    down = next(r for r in RULES if r.id == "itl-stutter-prefill-chunks")
    up = next(r for r in RULES if r.id == "ttft-prefill-budget-bound")

    firing = [Finding(down, "firing", ()), Finding(up, "firing", ())]
    engine = provenanced_engine({"max_num_batched_tokens": 8192, "max_model_len": 32768})
    status, reason, best, _ = arbitrate(firing, {}, engine, CFG)
    assert status == "inconclusive" and best is None
    assert "contradicts" in reason


def test_a_rule_with_no_movable_knob_is_inconclusive_with_the_reasons() -> None:
    rule = next(r for r in RULES if r.id == "kv-preemption-capacity")

    # CPU server whose KV size is not fixed and not raisable: GPU-only knobs do not apply
    engine = provenanced_engine({"device": "cpu", "gpu_memory_utilization": 0.95})
    choice, *_, why_not = resolve_choice(rule, {}, engine, CFG)
    # the last resort (replicas) always applies: advice is never a dead end for this rule
    assert choice is not None and choice.name == "replicas"
    assert any("gpu_memory_utilization" in w for w in why_not)
    # a rule whose only knob cannot move
    stutter = next(r for r in RULES if r.id == "itl-stutter-prefill-chunks")
    engine2 = provenanced_engine({"max_num_batched_tokens": 2048})
    status, reason, best, _ = arbitrate([Finding(stutter, "firing", ())], {}, engine2, CFG)
    assert status == "inconclusive" and best is None and "no knob can move" in reason


def test_for_hold_time_is_honoured() -> None:
    rule = next(r for r in RULES if r.id == "kv-preemption-seqs-bind")
    ev = Evaluator([rule])
    values = rule.examples["fires"][0]
    assert ev.evaluate(values, 100)[0].state == "pending"
    assert ev.evaluate(values, 100 + rule.for_s - 1)[0].state == "pending"
    assert ev.evaluate(values, 100 + rule.for_s)[0].state == "firing"
    assert ev.evaluate(rule.examples["quiet"][0], 100 + rule.for_s + 1)[0].state == "inactive"
    assert ev.evaluate(values, 200)[0].state == "pending"  # the hold restarts


def test_unknown_signal_makes_a_rule_unknown_not_inactive() -> None:
    rule = next(r for r in RULES if r.id == "kv-preemption-seqs-bind")
    values = dict(rule.examples["fires"][0])
    values["running_to_max_num_seqs_ratio"] = None  # type: ignore[assignment]
    holds, _, _ = conditions_hold(rule, values)
    assert holds is None
    values["preemptions_per_second"] = 0.0
    holds, _, _ = conditions_hold(rule, values)
    assert holds is False  # known evidence already rules it out


def test_explain_rule_id_prints_the_rules_docs() -> None:
    res = CliRunner().invoke(main, ["explain", "kv-preemption-seqs-bind"])
    assert res.exit_code == 0
    for part in ("max_num_seqs", "What:", "Why:", "What should move:", "Roll back:", "Verify:"):
        assert part in res.output
    res = CliRunner().invoke(main, ["explain", "no-such-rule"])
    assert res.exit_code == 2 and "no rule" in res.output


def test_a_pending_better_rule_holds_lesser_advice_back() -> None:
    """While kv-preemption-seqs-bind builds up its hold time, kv-capacity-below-context (info)
    may not become the advice: the diagnosis waits instead of flipping knobs."""

    seqs = next(r for r in RULES if r.id == "kv-preemption-seqs-bind")
    ctx = next(r for r in RULES if r.id == "kv-capacity-below-context")
    stutter = next(r for r in RULES if r.id == "itl-stutter-prefill-chunks")
    findings = [Finding(seqs, "pending", (), since=0.0), Finding(ctx, "firing", ())]
    assert [f.rule.id for f in building(findings, ctx, CFG)] == ["kv-preemption-seqs-bind"]
    # a lesser pending rule does not hold a better one back
    findings = [Finding(ctx, "pending", (), since=0.0), Finding(stutter, "firing", ())]
    assert building(findings, stutter, CFG) == []
    assert [f.rule.id for f in building(findings, None, CFG)] == ["kv-capacity-below-context"]
