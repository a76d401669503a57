"""Dependency faults against the real `rca serve` and `rca worker` (tests/faults/deps_stack.py):
Prometheus, the trace backend (Jaeger here, Tempo in test_dependencies_tempo.py) and the LLM
down, slow, answering garbage, an HTML error page, JSON of the wrong shape or text with NUL in it;
Slack answering 429 with Retry-After, 500, and hanging.

Whatever fails, for every alert accepted: one investigation, run once and finished `done` with
its findings and hypotheses stored whole, or, when Prometheus could not be read, `inconclusive`
with its findings and no cause; the result says what was missing (rca/domain/coverage.py) and who
really wrote it (the rules' ranking whenever the LLM failed); and one Slack message per incident,
or, while Slack fails for good, a delivery recorded as failed with every attempt."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from rca.domain.coverage import data_gap, judged
from tests.fakes.slack import Failure
from tests.faults.deps_proxy import Fault
from tests.faults.deps_stack import (
    LLM_TITLE,
    SLACK_MAX_ATTEMPTS,
    SLACK_TIMEOUT,
    Accepted,
    Stack,
    dependency_stack,
    incident,
    post_alerts,
    slack_messages,
    wait_finished,
)
from tests.helpers.waiting import wait_for

FAULTS = [Fault.DOWN, Fault.SLOW, Fault.GARBAGE, Fault.HTML, Fault.WRONG_SHAPE, Fault.NUL]
ALERTS = 2  # per scenario: the worker's two investigation processes both meet the fault
TRACE_KEY = "trace_latency_attribution"
BASELINE_MISSING = {"cpu_throttling"}  # a pod's signal: the stub Prometheus's series name no pod


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with dependency_stack(tmp_path_factory.mktemp("deps"), "jaeger") as running:
        yield running


@pytest.fixture(scope="module")
def healthy(stack: Stack) -> list[dict]:
    """Investigations with every dependency healthy: what a fault must change is there. (The stub
    Prometheus has no pod, so a pod-scoped signal is missing even then.) Their Slack messages are
    read here, before any test's `heal` clears what the fake Slack received."""
    heal(stack)
    return [found | {"slack_text": posted_once(stack, found["accepted"])} for found in run(stack, "healthy")]


@pytest.fixture
def deps(stack: Stack, healthy: list[dict]) -> Iterator[Stack]:
    """The stack with every dependency healthy before and after the test."""
    heal(stack)
    yield stack
    heal(stack)


def heal(stack: Stack) -> None:
    for proxy in (stack.prometheus, stack.traces, stack.llm):
        proxy.set(Fault.HEALTHY)
    stack.slack.reset()  # answers at once, nothing scripted left over


def investigated_once(stack: Stack, accepted: Accepted, status: str = "done") -> dict:
    """The incident, checked: one investigation, run once, finished with `status`, stored whole
    (an inconclusive one with its findings and no cause)."""
    found = incident(stack, accepted.incident_id)
    [investigation] = found["investigations"]
    assert investigation["id"] == accepted.investigation_id
    assert (investigation["status"], investigation["attempts"]) == (status, 1), investigation.get("error")
    assert investigation["finished_at"] and investigation["findings"]
    ranks = [h["rank"] for h in investigation["hypotheses"]]
    assert ranks == list(range(1, len(ranks) + 1)) and bool(ranks) == (status == "done")
    return found


def posted_once(stack: Stack, accepted: Accepted) -> str:
    """Slack shows the incident in exactly one message; its blocks' text, joined."""

    def delivered() -> dict | None:  # the service's own record of it
        slack = incident(stack, accepted.incident_id)["slack"]
        return slack if slack and slack["status"] == "delivered" else None

    slack = wait_for(delivered, 20, f"the Slack message\n{stack.logs()}")
    assert (slack["messages"], slack["updates"]) == (1, 0), slack
    [message] = slack_messages(stack, accepted.incident_id)
    return " ".join(str(block) for block in message["blocks"])


def gap_of(investigation: dict) -> str | None:
    """What the investigation could not see, as every output words it; None when it saw everything."""
    gap = data_gap([judged(f) for f in investigation["findings"]], investigation["error"])
    assert (gap.text if gap else None) == investigation["data_gap"]  # the API says it in the same words
    return gap.text if gap else None


def missing(investigation: dict) -> set[str]:
    """The findings without data."""
    return {f["id"] for f in investigation["findings"] if f["status"] == "unavailable"}


def run(stack: Stack, label: str, status: str = "done") -> list[dict]:
    """Post ALERTS new alert groups and wait for their investigations."""
    accepted = post_alerts(stack, label, ALERTS)
    wait_finished(stack, accepted)
    return [dict(investigated_once(stack, a, status), accepted=a) for a in accepted]


def test_healthy_dependencies_give_the_llm_answer_with_metrics_and_traces(deps: Stack, healthy: list[dict]) -> None:
    for found in healthy:
        investigation = found["investigation"]
        assert investigation["analyst"] == "llm" and investigation["fallback_reason"] is None
        assert investigation["hypotheses"][0]["title"] == LLM_TITLE
        assert investigation["error"] is None and missing(investigation) == BASELINE_MISSING
        [trace] = [f for f in investigation["findings"] if f["id"] == TRACE_KEY]
        assert trace["status"] == "ok", trace["detail"]
        assert "Written by model" in found["slack_text"] and "fallback" not in found["slack_text"]


@pytest.mark.parametrize("fault", FAULTS)
def test_prometheus_fault(deps: Stack, fault: Fault) -> None:
    deps.prometheus.set(fault)
    before, asked = deps.prometheus.requests, deps.llm.requests
    results = run(deps, f"prometheus-{fault}", "done" if fault == Fault.NUL else "inconclusive")
    assert (deps.prometheus.requests > before) != (fault == Fault.DOWN)  # the fault was met
    for found in results:
        investigation = found["investigation"]
        text = posted_once(deps, found["accepted"])
        if fault == Fault.NUL:  # the series came, their labels cleaned: a measured result
            assert investigation["error"] is None and missing(investigation) == BASELINE_MISSING
            assert any(f["series_labels"] for f in investigation["findings"])  # stored, cleaned
            continue
        assert investigation["error"] and "Prometheus" in investigation["error"]
        assert investigation["inconclusive_reason"] == "prometheus_unreachable" and investigation["analyst"] is None
        gap = gap_of(investigation)
        assert gap is not None and gap.startswith("Could not investigate: Prometheus unreachable"), gap
        assert "Could not investigate: Prometheus unreachable" in text and "not a healthy verdict" in text
        assert "Most likely causes" not in text
    if fault != Fault.NUL:
        assert deps.llm.requests == asked, "the LLM was asked to explain nothing"


@pytest.mark.parametrize("fault", FAULTS)
def test_trace_backend_fault(deps: Stack, fault: Fault) -> None:
    deps.traces.set(fault)
    before = deps.traces.requests
    results = run(deps, f"jaeger-{fault}")
    assert (deps.traces.requests > before) != (fault == Fault.DOWN)
    for found in results:
        check_trace_fault(deps, found, fault)


def check_trace_fault(stack: Stack, found: dict, fault: Fault) -> None:
    """Metrics and the LLM carry on; the trace evidence is labelled missing, with why."""
    investigation = found["investigation"]
    text = posted_once(stack, found["accepted"])
    assert investigation["error"] is None and investigation["analyst"] == "llm"
    [trace] = [f for f in investigation["findings"] if f["id"] == TRACE_KEY]
    if fault == Fault.NUL:  # read, its names cleaned
        assert trace["status"] == "ok", trace["detail"]
        assert "decode" in trace["detail"]  # the span names, stored without their NUL characters
        return
    assert trace["status"] == "unavailable", trace
    assert missing(investigation) == BASELINE_MISSING | {TRACE_KEY}
    gap = gap_of(investigation)
    assert gap is not None and TRACE_KEY in gap, gap
    assert TRACE_KEY in text


@pytest.mark.parametrize("fault", FAULTS)
def test_llm_fault(deps: Stack, fault: Fault) -> None:
    deps.llm.set(fault)
    before = deps.llm.requests
    results = run(deps, f"llm-{fault}")
    assert (deps.llm.requests > before) != (fault == Fault.DOWN)
    for found in results:
        investigation = found["investigation"]
        text = posted_once(deps, found["accepted"])
        assert missing(investigation) == BASELINE_MISSING  # the LLM is no evidence: nothing more is missing
        if fault == Fault.NUL:  # what the model wrote, without the NUL characters
            assert investigation["analyst"] == "llm" and investigation["hypotheses"][0]["title"] == LLM_TITLE
            assert "\\u0000" in investigation["llm_exchange"][0]["raw_response"]  # what came, kept for audit
            continue
        assert investigation["analyst"] == "rules" and investigation["fallback_reason"], investigation
        assert all(h["analyst"] == "rules" and h["title"] != LLM_TITLE for h in investigation["hypotheses"])
        assert "rules fallback" in text and "Written by model" not in text


def incident_of(payload: dict) -> str:
    """The incident a message is about ("Incident #N" in its blocks). Not the whole payload: what
    a retry shows may have changed meanwhile (the similar incidents of a busy run)."""
    found = re.search(r"Incident #(\d+)", json.dumps(payload.get("blocks")))
    assert found, payload
    return found.group(1)


def test_slack_429_is_retried_after_retry_after_and_posts_once(deps: Stack) -> None:
    deps.slack.fail_next(*[Failure(429, retry_after=1)] * ALERTS)
    for found in run(deps, "slack-429"):
        posted_once(deps, found["accepted"])
    limited = [r for r in deps.slack.received if r.status == 429]
    assert len(limited) == ALERTS
    for refused in limited:  # the retry of each came no sooner than Retry-After said
        # The same incident's message (each send carries a key of its own: rca/notify/once.py).
        retried = [r for r in deps.slack.posts() if incident_of(r.payload) == incident_of(refused.payload)]
        assert len(retried) == 1 and retried[0].at - refused.at >= 0.95


def test_slack_500_is_retried_and_posts_once(deps: Stack) -> None:
    # One 500 per incident, in whatever order the calls come: at most SLACK_MAX_ATTEMPTS - 1 for one.
    deps.slack.fail_next(*[Failure(500, error="internal_error")] * ALERTS)
    failed_calls = 0
    for found in run(deps, "slack-500"):
        posted_once(deps, found["accepted"])
        attempts = incident(deps, found["accepted"].incident_id)["slack"]["attempts"]
        failed_calls += sum(a["http_status"] == 500 for a in attempts)
    assert failed_calls == ALERTS


@pytest.mark.parametrize("hang", [False, True], ids=["500", "hanging"])
def test_slack_failing_for_good_is_recorded_as_failed_and_investigations_go_on(deps: Stack, hang: bool) -> None:
    """A Slack that answers 500 or hangs on every call: the investigations finish at their pace,
    and each delivery ends `failed` after its attempts, every one recorded: never silently lost."""
    if hang:
        deps.slack.delay = 3 * SLACK_TIMEOUT  # each call outlives the service's timeout
    else:
        deps.slack.down = True
    for found in run(deps, f"slack-down-{'hang' if hang else '500'}"):
        incident_id = found["accepted"].incident_id
        assert found["investigation"]["total_seconds"] < 10  # no Slack call in its path

        def failed(incident_id: int = incident_id) -> dict | None:
            slack = incident(deps, incident_id)["slack"]
            return slack if slack and slack["status"] == "failed" else None

        slack = wait_for(failed, 30, f"the delivery to fail for good\n{deps.logs()}")
        assert slack["messages"] == 0 and slack["last_error"]
        assert len(slack["attempts"]) == SLACK_MAX_ATTEMPTS
        assert all(a["outcome"] != "ok" for a in slack["attempts"])
        if not hang:
            assert slack_messages(deps, incident_id) == []
