"""The service's own metrics: every one is defined here, with its help text, and the stages that
record them import it. `docs/metrics.md` lists them for the alerts and dashboards built on them.

Two ways they reach a scrape (`scrape_registry`):
- one process (the API, embedded investigations included): prometheus-client's default registry,
  with the process and Python collectors;
- several processes (the Celery worker and its prefork children): prometheus-client's
  multiprocess mode. `rca worker` points `PROMETHEUS_MULTIPROC_DIR` at an emptied directory
  before anything imports prometheus-client (see `rca.cli.multiprocess`), every process writes its values to
  its own file there, and the worker's metrics port sums them with `MultiProcessCollector`.

No label carries an unbounded value (an incident id, a URL, an alert name): each label below has
a small fixed set of values, pre-created at zero so that rates and alerts see them from the start.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rca.domain.status import InconclusiveReason, InvestigationStatus
from rca.domain.waiting import Waiting

log = logging.getLogger(__name__)

# `_created` series double every counter and do not exist in multiprocess mode; both modes show the same.
disable_created_metrics()

WEBHOOK_OUTCOMES = {
    200: "stored",
    400: "not_json",
    401: "unauthorized",
    408: "body_timeout",
    413: "too_large",
    422: "invalid",
    503: "database_unavailable",
}
PROMETHEUS_ERROR_REASONS = ("timeout", "refused", "dns", "tls", "connection", "http_status", "bad_response")
TRACE_ERROR_REASONS = ("timeout", "connection", "http_status", "bad_response", "too_large")
TRACE_BACKENDS = ("jaeger", "tempo")
LLM_OUTCOMES = ("ok", "format_rejected", "http_status", "timeout", "connection", "bad_response")
SLACK_OUTCOMES = {"post": "posted", "update": "updated", "reply": "replied"}
SLACK_FOUND = "found"  # a message posted before whose record was lost, found by its key: not posted again
SLACK_FAILURE_REASONS = ("rate_limited", "server_error", "auth", "rejected", "timeout", "network")
# 0.1 s (a cached, Prometheus-less run) to the 5 min worst case (RCA_INVESTIGATION_TIMEOUT_SECONDS raised).
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 300)

WEBHOOK_REQUESTS = Counter(
    "rca_webhook_requests_total", "Alertmanager webhook answers, by outcome and HTTP status.", ["outcome", "code"]
)
INCIDENTS_OPENED = Counter("rca_incidents_opened_total", "Incidents created from webhook notifications.")
INVESTIGATIONS = Counter(
    "rca_investigations_total", "Investigations finished, by final status (done, inconclusive or failed).", ["status"]
)
INCONCLUSIVE = Counter(
    "rca_investigations_inconclusive_total",
    "Investigations that could read no evidence and ranked no cause, by reason "
    "(no_prometheus, prometheus_unreachable, no_data).",
    ["reason"],
)
INVESTIGATION_DURATION = Histogram(
    "rca_investigation_duration_seconds",
    "Wall time of a finished investigation attempt, by final status.",
    ["status"],
    buckets=DURATION_BUCKETS,
)
PROMETHEUS_QUERY_ERRORS = Counter(
    "rca_prometheus_query_errors_total", "Prometheus queries that failed, by reason.", ["reason"]
)
TRACE_QUERY_ERRORS = Counter(
    "rca_trace_query_errors_total", "Trace backend requests that failed, by backend and reason.", ["backend", "reason"]
)
LLM_REQUESTS = Counter("rca_llm_requests_total", "Requests to the LLM endpoint, by outcome.", ["outcome"])
LLM_TOKENS = Counter(
    "rca_llm_tokens_total", "LLM tokens as the endpoint counted them, by kind (prompt or completion).", ["kind"]
)
LLM_COST = Counter("rca_llm_cost_dollars_total", "Estimated LLM spend in dollars (RCA_LLM_PRICE_PER_1K_*).")
SLACK_DELIVERIES = Counter("rca_slack_deliveries_total", "Slack calls that succeeded, by what they did.", ["outcome"])
SLACK_FAILURES = Counter("rca_slack_delivery_failures_total", "Slack calls that failed, by reason.", ["reason"])
SLACK_ACTION_OUTCOMES = ("recorded", "queued", "refused", "ignored", "unsigned")
SLACK_ACTIONS = Counter(
    "rca_slack_actions_total", "Clicks on the incident message's buttons, by what came of them.", ["outcome"]
)
SWEEPER_REENQUEUED = Counter(
    "rca_sweeper_reenqueued_total", "Stranded investigations the sweeper handed to the queue again."
)
SWEEPER_SLACK_REQUEUED = Counter(
    "rca_sweeper_slack_requeued_total", "Owed Slack notices the sweeper handed to the Slack queue again."
)
SCANS = Counter("rca_scans_total", "Fleet scans finished (rca/scan).")
SCAN_QUERIES = Counter("rca_scan_queries_total", "PromQL queries the fleet scans sent.")
SCAN_TARGETS = Counter("rca_scan_targets_total", "Serving targets the fleet scans assessed, summed over scans.")
SCAN_DURATION = Histogram(
    "rca_scan_duration_seconds", "Wall time of one fleet scan.", buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30)
)
SCAN_WARMING = Counter(
    "rca_scan_warming_total",
    "Serving targets the fleet scans held as warming (history not yet read), summed over scans.",
)
SCAN_TRANSITIONS = Counter(
    "rca_scan_transitions_total", "Early-warning state changes of serving targets, by the state entered.", ["state"]
)
SCAN_STATES = ("ok", "watch", "warning", "cleared")  # rca.scan.states.ScanState

for _state in SCAN_STATES:
    SCAN_TRANSITIONS.labels(state=_state)
for _code, _outcome in WEBHOOK_OUTCOMES.items():
    WEBHOOK_REQUESTS.labels(outcome=_outcome, code=str(_code))
for _status in (InvestigationStatus.DONE, InvestigationStatus.INCONCLUSIVE, InvestigationStatus.FAILED):
    INVESTIGATIONS.labels(status=_status)
    INVESTIGATION_DURATION.labels(status=_status)
for _blind in InconclusiveReason:
    INCONCLUSIVE.labels(reason=_blind)
for _reason in PROMETHEUS_ERROR_REASONS:
    PROMETHEUS_QUERY_ERRORS.labels(reason=_reason)
for _reason in TRACE_ERROR_REASONS:
    for _backend in TRACE_BACKENDS:
        TRACE_QUERY_ERRORS.labels(backend=_backend, reason=_reason)
for _outcome in LLM_OUTCOMES:
    LLM_REQUESTS.labels(outcome=_outcome)
for _kind in ("prompt", "completion"):
    LLM_TOKENS.labels(kind=_kind)
for _outcome in (*SLACK_OUTCOMES.values(), SLACK_FOUND):
    SLACK_DELIVERIES.labels(outcome=_outcome)
for _reason in SLACK_FAILURE_REASONS:
    SLACK_FAILURES.labels(reason=_reason)
for _outcome in SLACK_ACTION_OUTCOMES:
    SLACK_ACTIONS.labels(outcome=_outcome)


def webhook_answered(code: int) -> None:
    """Count one webhook answer; codes the webhook does not document count as `error`."""
    WEBHOOK_REQUESTS.labels(outcome=WEBHOOK_OUTCOMES.get(code, "error"), code=str(code)).inc()


def investigation_finished(status: str, seconds: float, reason: InconclusiveReason | None = None) -> None:
    """Count a finished investigation (done, inconclusive with its reason, or failed) and its duration."""
    INVESTIGATIONS.labels(status=status).inc()
    INVESTIGATION_DURATION.labels(status=status).observe(seconds)
    if reason is not None:
        INCONCLUSIVE.labels(reason=reason).inc()


def scan_finished(targets: int, warming: int, queries: int, seconds: float) -> None:
    """Count one fleet scan and its cost."""
    SCANS.inc()
    SCAN_TARGETS.inc(targets)
    SCAN_WARMING.inc(warming)
    SCAN_QUERIES.inc(queries)
    SCAN_DURATION.observe(seconds)


def llm_usage(prompt_tokens: int, completion_tokens: int, cost: float) -> None:
    """Add one investigation's LLM tokens and estimated cost."""
    LLM_TOKENS.labels(kind="prompt").inc(prompt_tokens)
    LLM_TOKENS.labels(kind="completion").inc(completion_tokens)
    LLM_COST.inc(cost)


def version() -> str:
    try:
        return metadata.version("llm-serving-rca")
    except metadata.PackageNotFoundError:
        return "unknown"


class BuildInfoCollector(Collector):
    """`rca_build_info{version}` = 1. A collector rather than prometheus-client's `Info`, which
    multiprocess mode does not support."""

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "rca_build_info", "The running version of llm-serving-rca (always 1).", labels=["version"]
        )
        info.add_metric([version()], 1)
        yield info


class QueueCollector(Collector):
    """`rca_queue_depth` and `rca_queue_oldest_age_seconds` by queue, read at each scrape through
    `waiting` (the API passes the store's indexed queries: investigations queued, Slack notices
    owed), so they are right whichever process enqueued and whichever runs the queue."""

    DEPTH = "rca_queue_depth"
    DEPTH_HELP = "Items waiting in each queue: investigations queued, Slack notices owed."
    AGE = "rca_queue_oldest_age_seconds"
    AGE_HELP = "How long the oldest item of each queue has waited (0 when none waits)."

    def __init__(self, waiting: Callable[[], Mapping[str, Waiting]]) -> None:
        self.waiting = waiting

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            self.DEPTH, self.DEPTH_HELP, labels=["queue"]
        )  # registering must not touch the database
        yield GaugeMetricFamily(self.AGE, self.AGE_HELP, labels=["queue"])

    def collect(self) -> Iterator[Metric]:
        try:
            queues = self.waiting()
        except Exception as exc:  # the database is down: leave the gauges out, /readyz says why
            log.warning("queues not measured: %s", exc)
            return
        depth = GaugeMetricFamily(self.DEPTH, self.DEPTH_HELP, labels=["queue"])
        age = GaugeMetricFamily(self.AGE, self.AGE_HELP, labels=["queue"])
        for queue, waiting in sorted(queues.items()):
            depth.add_metric([queue], waiting.depth)
            age.add_metric([queue], waiting.oldest_age)
        yield depth
        yield age


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR")


def scrape_registry(waiting: Callable[[], Mapping[str, Waiting]] | None = None) -> CollectorRegistry:
    """What one scrape of this process shows: every process's values in multiprocess mode (plus
    this one's process metrics), else the default registry; the build info; and, given a way to
    read them, the queues' depth and age."""
    registry = CollectorRegistry()
    if multiprocess_dir():
        multiprocess.MultiProcessCollector(registry)
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
    else:
        registry.register(REGISTRY)  # a registry is a collector of its collectors
    registry.register(BuildInfoCollector())
    if waiting is not None:
        registry.register(QueueCollector(waiting))
    return registry


def mark_process_dead(pid: int) -> None:
    """Drop a dead process's live gauges in multiprocess mode (its counters stay in the sums)."""
    if multiprocess_dir():
        multiprocess.mark_process_dead(pid)
