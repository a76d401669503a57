"""Which alerting rules are read as the operator's SLO, and which target each one covers: the
forms of comparison, units from the profile's own queries, recording rules followed by name,
quantiles, stacks, label matchers, the most specific and then strictest rule; and the rule book's
refresh (never every scan; an unreachable or garbled rules API keeps the rules read before)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest
import requests

from rca.collect.profile import load_profile
from rca.scan.fleet import FleetSource, ServingInstance
from rca.scan.queries import discovery_query
from rca.scan.slo_rules import ITL_SIGNAL, RuleBook, Slo, SloRule, shapes, slo_rules, slo_words
from rca.signals.slo import TTFT_SIGNAL

PROFILE = load_profile()
SHAPES = shapes(PROFILE)
VLLM = "vllm:time_to_first_token_seconds_bucket"
TRITON_MS = "nv_inference_first_response_histogram_ms_bucket"


def p95(selector: str, window: str = "5m", quantile: str = "0.95") -> str:
    return f"histogram_quantile({quantile}, sum by (le, instance) (rate({selector}[{window}])))"


Records = Sequence[tuple[str, str, dict[str, str]]]


def groups(*alerts: str, records: Records = ()) -> list[dict[str, Any]]:
    """A rules API answer's groups: the alerts (named A0, A1, ...) and the recording rules."""
    rules: list[dict[str, Any]] = [
        {"type": "recording", "name": name, "query": query, "labels": labels} for name, query, labels in records
    ]
    rules += [{"type": "alerting", "name": f"A{i}", "query": query, "labels": {}} for i, query in enumerate(alerts)]
    return [{"name": "llm-serving", "file": "/etc/prometheus/rules.yml", "rules": rules}]


def read(*alerts: str, records: Records = ()) -> list[SloRule]:
    return slo_rules(groups(*alerts, records=records), SHAPES)


def thresholds(rules: list[SloRule]) -> list[tuple[str, str, float]]:
    return [(rule.alert, rule.signal, round(rule.seconds, 6)) for rule in rules]


def serving(
    instance: str = "gpu-a:8000", job: str | None = "vllm", stack: str | None = "vllm_v1", **labels: str
) -> ServingInstance:
    host = instance.split(":")[0]
    return ServingInstance(instance, host, host, job, stack, labels)


def test_the_comparisons_read_as_an_slo() -> None:
    rules = read(
        f"{p95(VLLM)} > 1",
        f"{p95(VLLM)} >= 1.5",
        f"0.5 < {p95(VLLM)}",
        f"({p95(VLLM)}) > (2 * 500 / 1000)",
        f"{p95(VLLM)} > 2 and on (instance) sum by (instance) (rate(vllm:request_success_total[5m])) > 0.1",
        p95(VLLM + '{job="a"}') + " > 3 or " + p95(VLLM + '{job="b"}') + " > 4",
        f"{p95(VLLM)} > 5 unless on (instance) up == 0",
    )
    assert thresholds(rules) == [
        ("A0", TTFT_SIGNAL, 1.0),
        ("A1", TTFT_SIGNAL, 1.5),
        ("A2", TTFT_SIGNAL, 0.5),
        ("A3", TTFT_SIGNAL, 1.0),
        ("A4", TTFT_SIGNAL, 2.0),
        ("A5", TTFT_SIGNAL, 3.0),
        ("A5", TTFT_SIGNAL, 4.0),
        ("A6", TTFT_SIGNAL, 5.0),
    ]
    assert [r.comparison for r in rules[:3]] == [">", ">=", ">"]
    assert rules[0].source == "rule A0 (group llm-serving, rules.yml)"
    assert (rules[0].quantile, rules[0].window_seconds) == (0.95, 300.0)


def test_what_is_not_read_as_an_slo() -> None:
    assert (
        read(
            f"{p95(VLLM)} < 0.1",  # fires when fast
            f"{p95(VLLM)} > bool 1",  # no alert condition
            f"{p95(VLLM)} > on (instance) slo_target_seconds",  # against a series
            "max_over_time(rca:ttft_seconds:p95_rate5m[10m]) > 2",  # a function over a recorded series
            f"{p95('vllm:e2e_request_latency_seconds_bucket')} > 10",  # no profile signal of the SLOs
            f"{p95('tgi_request_queue_duration_bucket')} > 3",  # TGI's queue time alone is not its TTFT
            "sum(rate(vllm:time_to_first_token_seconds_sum[5m])) > 1",  # a mean's numerator, no quantile
            p95(VLLM + '{job=~"\\\\pL+"}') + " > 1",  # an RE2 class Python's re cannot compile
            "this is not PromQL >",
        )
        == []
    )


def test_units_follow_the_profiles_own_queries() -> None:
    rules = read(
        f"{p95(TRITON_MS)} > 1000",  # a millisecond histogram against milliseconds: 1 s
        f"{p95(TRITON_MS)} / 1000 > 1.5",  # turned into seconds in the expression
        f"{p95(VLLM)} * 1000 > 500",  # seconds turned into milliseconds
        f"1000 * {p95(VLLM)} > 800",
    )
    assert thresholds(rules) == [
        ("A0", TTFT_SIGNAL, 1.0),
        ("A1", TTFT_SIGNAL, 1.5),
        ("A2", TTFT_SIGNAL, 0.5),
        ("A3", TTFT_SIGNAL, 0.8),
    ]
    assert rules[0].stacks == frozenset({"triton"})
    assert rules[2].stacks == frozenset({"vllm_v1", "vllm_v0", "triton"})  # Triton's vLLM backend too


def test_tgis_ttft_is_its_queue_plus_prefill_as_the_profile_computes_it() -> None:
    queue = "histogram_quantile(0.95, sum by (le) (rate(tgi_request_queue_duration_bucket[5m])))"
    prefill = (
        "histogram_quantile(0.95, sum by (le) "
        '(rate(tgi_batch_forward_duration_bucket{method="prefill",job="tgi"}[5m])))'
    )
    [rule] = read(f"{queue} + {prefill} > 2.5")
    assert (rule.signal, rule.seconds, rule.stacks) == (TTFT_SIGNAL, 2.5, frozenset({"tgi"}))
    # `method="prefill"` is part of the signal (the profile's query has it), not of the target.
    assert [(m.name, m.op, m.value) for m in rule.matchers] == [("job", "=", "tgi")]
    assert rule.covers({"instance": "t:80", "job": "tgi"}, "tgi")


def test_recording_rules_are_followed_by_name_and_their_labels_pick_the_definitions() -> None:
    records = [
        (
            "team:ttft:p95",
            f"histogram_quantile(0.95, sum by (le, instance, job) (rate({VLLM}[5m])))",
            {"stack": "vllm"},
        ),
        (
            "team:ttft:p95",
            "histogram_quantile(0.95, sum by (le, instance, job) "
            "(rate(sglang:time_to_first_token_seconds_bucket[5m])))",
            {"stack": "sglang"},
        ),
        ("team:ttft:p95_ms", f"histogram_quantile(0.95, sum by (le, instance) (rate({TRITON_MS}[1h])))", {}),
        ("team:ttft:ms_again", "team:ttft:p95_ms", {}),
        ("loop:a", "loop:b", {}),
        ("loop:b", "loop:a", {}),
    ]
    rules = read(
        'team:ttft:p95{job="premium"} > 1',
        'team:ttft:p95{stack="sglang"} > 0.7',
        "team:ttft:ms_again > 1200",
        "loop:a > 1",
        records=records,
    )
    assert [(r.alert, r.seconds, r.stacks) for r in rules] == [
        ("A0", 1.0, frozenset({"vllm_v1", "vllm_v0", "triton"})),
        ("A0", 1.0, frozenset({"sglang"})),
        ("A1", 0.7, frozenset({"sglang"})),  # the recording rule's own `stack` label chose it
        ("A2", 1.2, frozenset({"triton"})),  # through two names, in milliseconds
    ]
    assert [(m.name, m.value) for m in rules[0].matchers] == [("job", "premium")]
    assert rules[1].matchers == rules[0].matchers and rules[2].matchers == ()
    assert rules[3].window_seconds == 3600


def test_the_deploy_rules_slo_reads_as_2_s_for_every_stack() -> None:
    import yaml

    from tests.e2e.promstack import RULES

    answer = []
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        rules = [
            {"type": "alerting", "name": rule["alert"], "query": rule["expr"]}
            if "alert" in rule
            else {"type": "recording", "name": rule["record"], "query": rule["expr"], "labels": rule.get("labels", {})}
            for rule in group["rules"]
        ]
        answer.append({"name": group["name"], "file": str(RULES), "rules": rules})
    found = slo_rules(answer, SHAPES)
    assert {(r.alert, r.signal, r.seconds) for r in found} == {("LLMTTFTSLOBreach", TTFT_SIGNAL, 2.0)}
    covered = {stack for r in found for stack in r.stacks or ()}
    assert covered == {"vllm_v1", "vllm_v0", "sglang", "tgi", "triton"}


def test_the_most_specific_rule_covers_a_target_then_the_strictest() -> None:
    book = RuleBook(PROFILE, 600)
    book.rules = read(
        f"{p95(VLLM)} > 2.5",  # the whole fleet
        p95(VLLM + '{job="vllm"}') + " > 1.8",
        p95(VLLM + '{job=~"vllm|vllm-canary"}') + " > 1.6",  # as specific: the stricter wins
        p95(VLLM + '{job="vllm",model_name="llama"}') + " > 1",
        p95(VLLM + '{job="vllm",model_name!="llama",namespace=~".*"}') + " > 0.5",  # picks nothing more
        p95(VLLM + '{instance="gpu-z:8000"}') + " > 0.3",
        p95(VLLM, quantile="0.5") + " > 0.2",  # a median SLO: the p95 cannot be judged by it
        p95(VLLM + '{job="vllm"}', quantile="0.99") + " > 1.7",  # p95 beyond it: the p99 is too
        "histogram_quantile(0.95, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket[5m]))) > 0.05",
    )
    assert book.ttft_slo(serving(model_name="llama")) == Slo(1.0, "rule A3 (group llm-serving, rules.yml)")
    assert book.ttft_slo(serving(model_name="mistral")) == Slo(0.5, "rule A4 (group llm-serving, rules.yml)")
    assert book.ttft_slo(serving()) == Slo(0.5, "rule A4 (group llm-serving, rules.yml)")
    assert book.ttft_slo(serving(job="vllm-canary")) == Slo(1.6, "rule A2 (group llm-serving, rules.yml)")
    assert book.ttft_slo(serving(job="batch")) == Slo(2.5, "rule A0 (group llm-serving, rules.yml)")
    assert book.ttft_slo(serving("gpu-z:8000", job="batch")) == Slo(0.3, "rule A5 (group llm-serving, rules.yml)")
    # A vLLM histogram's rule says nothing of an SGLang engine; a target of unknown stack may export it.
    assert book.ttft_slo(serving(stack="sglang")) == Slo(2.0, "default")
    assert book.ttft_slo(serving(job="batch", stack=None)).seconds == 2.5
    # The ITL rule is kept for its signal, not the TTFT's.
    itl = book.rule_for(ITL_SIGNAL, serving())
    assert itl is not None and itl.seconds == 0.05
    assert book.labels() == {"job", "model_name", "namespace", "instance"}


def test_the_discovery_query_groups_by_the_labels_the_rules_match_on() -> None:
    assert "group by (instance, job, __name__) (" in discovery_query(PROFILE)
    assert "group by (instance, job, __name__, model_name, namespace) (" in discovery_query(
        PROFILE, ["model_name", "namespace"]
    )


class FakeRules:
    """A rules API that answers, fails or answers garbage, as told."""

    def __init__(self) -> None:
        self.answer: Any = groups(f"{p95(VLLM)} > 1")
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def source_with(rules: FakeRules) -> FleetSource:
    return FleetSource(instant_query=lambda promql, at: [], range_query=lambda *args: [], rules_query=rules)


def test_the_rule_book_reads_again_only_after_its_refresh_and_keeps_what_it_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="rca.scan.slo_rules")
    rules = FakeRules()
    source = source_with(rules)
    clock = [0.0]
    book = RuleBook(PROFILE, 600, clock=lambda: clock[0])
    assert book.refresh(source) and rules.calls == 1 and source.queries == 1
    clock[0] = 599
    assert not book.refresh(source) and rules.calls == 1 and source.queries == 1
    first = book.ttft_slo(serving())
    assert first == Slo(1.0, "rule A0 (group llm-serving, rules.yml)")
    # Down, then answers that are not Prometheus': the rules read before stay; logged once.
    for failure in (requests.ConnectionError("refused"), "not a list", None, requests.ConnectionError("refused")):
        rules.answer = failure
        clock[0] += 600
        assert not book.refresh(source)
        assert book.ttft_slo(serving()) == first and book.failing
    assert rules.calls == 5 and source.queries == 5
    # A list of groups, however odd, is Prometheus' word: these rules hold no SLO.
    rules.answer = [{"rules": [{"type": "alerting"}, "a rule?", {"type": "recording", "name": "r", "query": "1"}]}, {}]
    clock[0] += 600
    assert book.refresh(source) and book.rules == [] and not book.failing
    assert book.ttft_slo(serving()) == Slo(2.0, "default")
    rules.answer = requests.ConnectionError("refused")  # a new outage is logged again
    clock[0] += 600
    book.refresh(source)
    logged = [r.getMessage() for r in caplog.records if r.name == "rca.scan.slo_rules"]
    assert sum("cannot read Prometheus' rules" in line for line in logged) == 2
    assert sum("rules read again" in line for line in logged) == 1


def test_an_explicit_config_slo_needs_no_rules() -> None:
    rules = FakeRules()
    book = RuleBook(PROFILE, 600, explicit_ttft=1.5)
    assert not book.refresh(source_with(rules)) and rules.calls == 0
    assert book.ttft_slo(serving()) == Slo(1.5, "config file")


def test_the_slo_in_words() -> None:
    assert slo_words(1.0, "rule X (group g, rules.yml)") == "TTFT SLO 1 s from rule X (group g, rules.yml)"
    assert slo_words(1.5, "config file") == "TTFT SLO 1.5 s from the config file"
    assert slo_words(2.0, "default") == "TTFT SLO 2 s (default)"


def test_a_source_without_a_rules_api_has_no_rules() -> None:
    source = FleetSource(instant_query=lambda promql, at: [], range_query=lambda *args: [])
    assert source.rules() == [] and source.queries == 0
    book = RuleBook(PROFILE, 600)
    assert book.refresh(source) and book.ttft_slo(serving()) == Slo(2.0, "default")
