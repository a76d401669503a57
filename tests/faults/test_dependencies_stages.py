"""The collection stages on their own against faulty dependencies, in this process and fast: the
trace stage with both backends, Jaeger and Tempo (rca/traces/evidence.py), behind the same fault
proxy as the whole-service suite (test_dependencies.py, which runs Jaeger), and answers of the
wrong shape at every step of each protocol, Prometheus' (rca/collect/prometheus.py) included.

Whatever a dependency answers, the stage returns data saying what is missing; it never raises
(an exception there failed the whole investigation: a 200 of the wrong shape from Prometheus or
from a trace backend was `failed`, no findings, no Slack post)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

import pytest

from rca.collect.profile import load_profile
from rca.collect.prometheus import Collection, PrometheusSource, choose_window
from rca.collect.target import Target, scope_candidates
from rca.config import ScopeConfig, TracesConfig, load_settings
from rca.domain.status import FindingStatus
from rca.traces.evidence import trace_findings
from rca.traces.findings import SUMMARY_KEY
from tests.fakes.traces import FakeBackend
from tests.faults.deps_proxy import Fault, FaultProxy, QuietServer, deepen_backlog, relay, traces_poison
from tests.faults.deps_stack import JAEGER_WRONG_SHAPE, SERVICE, TEMPO_WRONG_SHAPE, trace_store
from tests.helpers.loopback import LoopbackServer

FAULTS = [Fault.DOWN, Fault.SLOW, Fault.GARBAGE, Fault.HTML, Fault.WRONG_SHAPE, Fault.NUL]
NOW = datetime.now(UTC)
TARGET = Target(
    host="gpu-node-1",
    labels={"instance": "gpu-node-1:8000"},
    alert_start=NOW - timedelta(minutes=5),
    alertnames=["LLMRequestQueueMedianHigh"],
    hosts=["gpu-node-1"],
    instance="gpu-node-1:8000",
)
WINDOW = choose_window(TARGET.alert_start, NOW, timedelta(minutes=30), 1100, 15)


def collect(url: str) -> Collection:
    source = PrometheusSource(url, timeout=1, concurrency=8)
    profile = load_profile()
    source.aliases(profile.identities, TARGET.host_candidates(), WINDOW)
    return source.collect(profile, scope_candidates(TARGET, ScopeConfig()), WINDOW)


# Answers of Prometheus' HTTP API with the right status and the wrong body, each at the step it
# breaks: the envelope, the result, its elements, their samples.
PROMETHEUS_ANSWERS = {
    "no data": {"status": "success"},
    "result not a list": {"status": "success", "data": {"resultType": "vector", "result": "x"}},
    "element not an object": {"status": "success", "data": {"resultType": "vector", "result": ["x"]}},
    "a list": [1, 2, 3],
}


class ScriptedPrometheus(LoopbackServer):
    """Answers every instant query as a healthy Prometheus with one series, and every range query
    with `range_answer` (or the same for both when `instant_answer` is set)."""

    def __init__(self, range_answer: Any, instant_answer: Any = None) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                self.rfile.read(int(self.headers.get("content-length") or 0))
                healthy = {
                    "status": "success",
                    "data": {"resultType": "vector", "result": [{"metric": {}, "value": [time.time(), "1"]}]},
                }
                ranged = urlsplit(self.path).path.endswith("query_range")
                answer = range_answer if ranged else (instant_answer or healthy)
                body = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler, name="scripted-prometheus", server_class=QuietServer)


@pytest.mark.parametrize("answer", list(PROMETHEUS_ANSWERS.values()), ids=list(PROMETHEUS_ANSWERS))
def test_a_probe_answer_of_the_wrong_shape_is_a_prometheus_error(answer: Any) -> None:
    with ScriptedPrometheus(answer, instant_answer=answer) as server:
        collection = collect(server.base)
    assert collection.prometheus_error and "not a Prometheus answer" in collection.prometheus_error


@pytest.mark.parametrize("values", [[["x", "y"]], 7, [[1.0]]], ids=["not numbers", "not a list", "not pairs"])
def test_range_samples_of_the_wrong_shape_fail_that_query_only(values: Any) -> None:
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": values}]}}
    with ScriptedPrometheus(matrix) as server:
        collection = collect(server.base)
    assert collection.prometheus_error is None  # the probes answered
    errors = [r.error for r in collection.results if r.promql]  # every query that ran
    assert errors and all(e and e.startswith("query failed: not a Prometheus answer") for e in errors), errors


# ------------------------------------------------------------------------------------ traces


@pytest.fixture(scope="module", params=["jaeger", "tempo"])
def traces(request: pytest.FixtureRequest) -> Iterator[FaultProxy]:
    kind = request.param
    wrong = TEMPO_WRONG_SHAPE if kind == "tempo" else JAEGER_WRONG_SHAPE
    with (
        deepen_backlog(FakeBackend(kind, trace_store())) as fake,
        FaultProxy(fake.url, kind, wrong, traces_poison, 2.5) as proxy,
    ):
        yield proxy
        proxy.set(Fault.HEALTHY)


def read_traces(kind: str, url: str) -> dict[str, Any]:
    """The trace stage's summary finding for the alert's service: its status and detail."""
    settings = load_settings(
        webhook_token="w",
        api_tokens="a",
        traces_backend=kind,
        traces_url=url,
        traces_timeout_seconds=1,
        traces_sample_size=12,
        traces_budget_seconds=4,
    )
    findings = trace_findings(settings, TracesConfig(), [{"job": SERVICE}], TARGET.alert_start, WINDOW.start, NOW)
    [summary] = [f for f in findings if f.key == SUMMARY_KEY]
    return {"status": summary.status, "detail": summary.detail}


@pytest.mark.parametrize("fault", [Fault.HEALTHY, *FAULTS])
def test_trace_stage_says_what_failed_and_never_raises(traces: FaultProxy, fault: Fault) -> None:
    traces.set(fault)
    summary = read_traces(traces.name, traces.url)
    if fault in (Fault.HEALTHY, Fault.NUL):  # read; with NUL, the span names' NUL characters travel as text
        assert summary["status"] == FindingStatus.OK, summary["detail"]
        return
    assert summary["status"] == FindingStatus.UNAVAILABLE, summary["detail"]
    assert summary["detail"].startswith(f"data unavailable: {traces.name}: ")


class ScriptedTraces(LoopbackServer):
    """A Jaeger or Tempo that answers `path` with `answer` and every other path as the faithful
    fake at `upstream` does (so the service is known and the search finds traces)."""

    def __init__(self, upstream: str, path: str, answer: Any) -> None:
        parts = urlsplit(upstream)
        target = (parts.hostname or "127.0.0.1", parts.port or 80)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                route = urlsplit(self.path).path
                if route == path or (path.endswith("/") and route.startswith(path)):
                    status, body = 200, json.dumps(answer).encode()
                else:
                    status, _, body = relay(target, "GET", self.path, {}, b"")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler, name="scripted-traces", server_class=QuietServer)


# A 200 of the wrong shape at each step after the service list: the search, the trace by id.
TRACE_ANSWERS = {
    "jaeger": {
        "/api/traces": [
            {"data": [{"traceID": "a", "spans": [{"spanID": "1"}]}], "errors": None},  # a span without its times
            {"data": "none", "errors": None},
            {"data": [7], "errors": None},
        ]
    },
    "tempo": {
        "/api/search": [
            {"traces": [{"traceID": 7, "startTimeUnixNano": str(int(NOW.timestamp() - 600) * 10**9)}]},  # id a number
            {"traces": "none"},
        ],
        "/api/traces/": [{"batches": "none"}, {"batches": [{"scopeSpans": [{"spans": [{"spanId": 5}]}]}]}],
    },
}
TRACE_CASES = [
    (kind, path, answer)
    for kind, paths in TRACE_ANSWERS.items()
    for path, answers in paths.items()
    for answer in answers
]


@pytest.mark.parametrize(
    "kind,path,answer", TRACE_CASES, ids=[f"{k}{p}-{i}" for i, (k, p, _) in enumerate(TRACE_CASES)]
)
def test_trace_answers_of_the_wrong_shape_after_the_service_list_leave_no_traces(
    kind: str, path: str, answer: Any
) -> None:
    with deepen_backlog(FakeBackend(kind, trace_store())) as fake, ScriptedTraces(fake.url, path, answer) as scripted:
        summary = read_traces(kind, scripted.base)
    assert summary["status"] == FindingStatus.UNAVAILABLE, summary["detail"]
    assert f"not a {kind} answer" in summary["detail"] or "no traces" in summary["detail"], summary["detail"]
