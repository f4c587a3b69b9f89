"""RUNBOOK.md: the intro, the meta-alerts, then one section per rule rendered by
:func:`advisor.outputs.explain.rule_markdown` (the same text as ``explain RULE_ID``).
"""

from __future__ import annotations

from collections.abc import Iterable

from advisor.diagnose.ruleset import Rule
from advisor.outputs.alert_config import (
    ADVISOR_JOB,
    ALERT_FOR,
    DOWN_FOR,
    GENERATED_BY,
    SEVERITY_FOR,
    SUMMARY_ADVISOR_DOWN,
    SUMMARY_ERRORS,
    SUMMARY_ITL,
    SUMMARY_SERVER_DOWN,
    SUMMARY_SERVER_UNREACHABLE,
    SUMMARY_TTFT,
)
from advisor.outputs.explain import rule_markdown

# ---------------------------------------------------------------- runbook
RUNBOOK_INTRO = """\
# vllm-advisor runbook

Every alert of `deploy/prometheus/vllm-advisor.rules.yaml` links here. Three kinds:

- `VllmAdvisor<RuleId>` (the advice) fires while that rule is the advisor's **current
  recommendation** for one vLLM server: the advisor has already held the rule's conditions for
  the rule's own hold time, so the alert waits only {alert_for} more (to ride out a flapping
  choice). It carries the one knob to change and its value.
- `Vllm<RuleId>` (the symptom) fires while the rule's conditions hold, computed by Prometheus
  from vLLM's own series (the recording rules): on every server, for every rule that holds,
  chosen or not, with or without an advisor beside the server. Rules whose conditions read a
  knob (`max_num_seqs`, the token budget) need `vllm_advisor_engine_knob`, which a sidecar or
  the fleet daemon (`vllm-advisor run --prometheus`) exports. Its section is the rule's, below.
- Service level (`VllmTtftP95High`, `VllmItlP95High`, `VllmRequestErrorRatioHigh`,
  `VllmServerDown`) and the advisor itself (`VllmAdvisorDown`, `VllmAdvisorServerUnreadable`).

## Reading an alert

- `summary`: the symptom, in one static sentence (the rule's `summary`).
- `description`: the one knob to change, its direction and the exact values
  (`current -> proposed`), with the `vllm serve` flag.
- Labels `rule`, `knob`, `flag`, `direction`, `current`, `proposed` come from the advisor's
  `vllm_advisor_recommendation_info` series; `severity` is the rule's.
- `dashboard_url` opens the per-server dashboard on that instance: current recommendation,
  active rules, KV usage with preemptions, running vs `max_num_seqs`, latencies, throughput.

**Only the chosen rule alerts.** Several rules may hold at once; the advisor picks exactly
one (prerequisites first: it never says "raise max_num_seqs" while the server preempts).
Rules that hold but are not chosen do not page: change one knob at a time, and the next
recommendation follows from the new state. They are visible on the dashboard ("Active rules")
and in `vllm-advisor explain` ("Other findings").

## What to do

1. Run `vllm-advisor explain --daemon http://HOST:19842` (anywhere that reaches the advisor), or
   `vllm-advisor explain --url http://127.0.0.1:8000` on the host: it prints the recommendation,
   the evidence with values, why, and what should move.
2. Change that one knob, by the proposed step, and restart vLLM under the same load. The
   advisor notices the change (`vllm_advisor_engine_knob` moves; the dashboard marks it).
3. **Verify** with the signals listed in the rule's section below, before vs after, under
   comparable load: the daemon compares the windows by itself and records keep / revert /
   inconclusive (`vllm-advisor history`, `vllm_advisor_experiment_info`); for per-request-length
   buckets, compare two `vllm bench serve` result files with `vllm-advisor compare`. Near the
   server's knee (a queue that comes and goes under arrivals at a rate), one run a side cannot
   tell the knob from the draw: run each side twice and pass the second runs with `--a-again` and
   `--b-again`.
4. **Roll back** (restore the previous value) as the rule's section says when the signals
   did not improve, or when vLLM fails to start.

An alert resolves when the advisor stops recommending the change (the symptom is gone or
another rule took priority).

## How the proposed value is chosen

For `max_num_seqs`, `max_num_batched_tokens`, `kv_cache_memory_bytes` and
`gpu_memory_utilization` the value is chosen by prediction, not by a fixed step. Two models are
fitted from the server's own `/metrics` (step time per KV token read and per prefill token, the
load, the request lengths): a simulator of vLLM's scheduler, which replays the load it infers
(a closed loop of clients or open arrivals at a rate) step by step and counts goodput per
request, and a closed form of the steady state (the batch the cap, the KV cache, the token
budget and the offered load allow, the preemptions a batch larger than the cache causes). The
simulator decides where it has its inputs and reproduces today's measurement (not for a cut of
the token budget); the closed form elsewhere. The value advised is the one with the best
predicted goodput (throughput of requests within the TTFT and ITL targets) among those that keep
every target it meets now (within the prediction's error) and do not worsen one already missed
by more than 10%; of values within 1% of the best, the rule's own step, else the smallest move.
More KV memory is advised only as far as the device's free memory goes (where it is unknown: no
more than the rule's step). When every value would break a target, there is no advice
(`inconclusive`, naming the target). `vllm-advisor explain` shows the deciding model's prediction
next to the measured state and says which decided, `vllm_advisor_predicted{{metric}}` exports it,
and `vllm-advisor predict --set KNOB=VALUE` asks about any value; docs/prediction.md measures
both models against the recorded GPU and CPU runs.
"""

RUNBOOK_REPLICAS = """\
## Desired replicas (autoscaling)

`vllm_advisor_desired_replicas` is the number of replicas of a server the performance model
predicts meets the TTFT and ITL p95 targets at the observed load times `replicas_headroom` (1.2):
from the sidecar for the load of the one server it watches, from the fleet daemon per deployment
(servers sharing `model_name`, `namespace`, `job` and `service`). KEDA or an HPA scale the vLLM
Deployment to it (`deploy/kubernetes/autoscaling/`, docs/autoscaling.md).

- **It rises at once** when a breach is predicted at the count there is; **it falls only** after
  every prediction for `scale_in_hold` (5 min) found the lower count enough; the autoscaler
  recipes then remove one replica every 5 minutes.
- **A knob first.** While the advice is a per-server knob that the model predicts meets the
  targets (`vllm_advisor_desired_replicas_basis{{basis="knob_first"}}`), the count stays at the
  replicas there are: change the knob (the advice's alert and section below), then let the
  count follow.
- **`basis="no_queue"`**: no count meets the targets (a prefill longer than the TTFT target, a
  step slower than the ITL target): the count is where nothing queues any more; more replicas
  would not help. Look at the advice and at the targets themselves.
- **No series** (the advisor down, a server warming up or just changed, Prometheus unreadable):
  the count is unknown, never zero. The KEDA recipe keeps the replicas there are after three
  failed polls (`fallback.behavior: currentReplicas`); an HPA stops scaling (`ScalingActive`
  false in `kubectl describe hpa`).
- **Check the prediction** against what came: after a scale-out, TTFT p95 and ITL p95 should come
  near `vllm_advisor_desired_replicas_predicted_ttft_p95_seconds{{at="desired"}}` (and `itl`);
  the fleet dashboard's "Desired vs actual replicas" panel shows both counts.
- **Roll back** by deleting the ScaledObject or HPA (the Deployment keeps its last replica
  count) and setting `replicas` by hand.

"""

RUNBOOK_META = f"""\
## VllmAdvisorDown

**{SUMMARY_ADVISOR_DOWN}**

Severity `warning` · fires after {DOWN_FOR}

Without the advisor there are no recommendations and no rule alerts for that server. Check
the advisor's process or sidecar (`kubectl logs <pod> -c vllm-advisor`,
`journalctl -u vllm-advisor`), that it listens where Prometheus scrapes it (default
`127.0.0.1:19842`: bind to `0.0.0.0` in a container), and the scrape job
(`job="{ADVISOR_JOB}"`) in Prometheus' targets page.

## VllmAdvisorServerUnreadable

**{SUMMARY_SERVER_DOWN}**

Severity `warning` · fires after {DOWN_FOR}

`vllm_advisor_up` is 0: the advisor's scrapes of vLLM's `/metrics` fail (or, for the fleet
daemon, Prometheus's). vLLM is down, restarting (loading weights, compiling), out of memory, or
the advisor's `--vllm-url` is wrong. The advisor's own log and
`vllm_advisor_scrapes_total{{result!="success"}}` say why. Its advice is withdrawn meanwhile.

## VllmServerDown

**{SUMMARY_SERVER_UNREACHABLE}**

Severity `critical` · fires after {SEVERITY_FOR["critical"]}

Prometheus cannot scrape the vLLM server: the process is down or restarting, the pod is not
ready, or the network path is broken. Check the server's log and `kubectl describe pod`. Other
warning and info alerts of the same instance are inhibited meanwhile (the alertmanager example).

## VllmTtftP95High

**{SUMMARY_TTFT}**

Severity `warning` · fires after {SEVERITY_FOR["warning"]}

Time to first token, 95th percentile over 5 minutes, is over the target set at generation
(`generate --ttft-p95-target`). Look for the symptom alerts of the same instance: a queue at
the batch cap (`VllmQueueSeqsCapBinds`), prefill-bound prompts (`VllmTtftPrefillBudgetBound`),
a server at capacity (`VllmQueueAtCapacityScaleOut`); `vllm-advisor explain` names the knob.

## VllmItlP95High

**{SUMMARY_ITL}**

Severity `warning` · fires after {SEVERITY_FOR["warning"]}

Inter-token latency, 95th percentile over 5 minutes, is over its target
(`generate --itl-p95-target`). Large prefill chunks in the batch (`VllmItlStutterPrefillChunks`)
or preemption (`VllmKvPreemption...`) are the usual causes; a fuller batch raises ITL by design.

## VllmRequestErrorRatioHigh

**{SUMMARY_ERRORS}**

Severity `critical` · fires after 5m

The share of requests that finish with `finished_reason` `error` or `abort`
(`vllm:request_success_total`), or of HTTP 5xx answers of the API server
(`http_requests_total{{status="5xx"}}`), is over the ratio set at generation
(`generate --error-ratio`). Aborts are often clients giving up on slow answers: read them with
the latency alerts. Errors: the server's log.

# Rules
"""


def render_runbook(rules: Iterable[Rule]) -> str:
    """RUNBOOK.md: header, intro, meta-alerts, then one section per rule rendered by
    :func:`advisor.outputs.explain.rule_markdown` (the same text as ``explain RULE_ID``)."""
    parts = [
        f"<!-- DO NOT EDIT: {GENERATED_BY}. -->",
        "",
        RUNBOOK_INTRO.format(alert_for=ALERT_FOR),
        RUNBOOK_REPLICAS.format(),
        RUNBOOK_META,
    ]
    for rule in sorted(rules, key=lambda r: r.id):
        parts.append(rule_markdown(rule, "##"))
    return "\n".join(parts).rstrip("\n") + "\n"
