"""The whole service as processes, its dependencies behind fault proxies: `rca serve` and
`rca worker` (investigations and Slack on pools of their own, the scheduler) on the real
PostgreSQL (a database of their own) and Redis, with a stub Prometheus, a fake Jaeger or Tempo
holding a few hours of a vLLM service's traces, a fake OpenAI-compatible LLM and a fake Slack on
loopback. Each HTTP dependency sits behind a `FaultProxy` (deps_proxy.py) that a test switches to
down, slow, garbage, HTML, a wrong shape or NUL; the Slack fake scripts 429, 500 and hangs itself.

Timeouts are short (1 to 2 s) so that a slow dependency costs a test seconds, not minutes."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from rca.domain.status import InvestigationStatus
from rca.jobs.celery_app import create_app as create_celery_app
from rca.store.db import migrate
from rca.store.models import InvestigationRow
from tests.e2e.promstack import free_port
from tests.fakes.llm import FakeLLM, completion
from tests.fakes.prometheus import StubPrometheus
from tests.fakes.slack import TOKEN, FakeSlack
from tests.fakes.traces import HEALTHY, FakeBackend, Store, TraceFactory
from tests.faults.deps_proxy import FaultProxy, deepen_backlog, llm_poison, prometheus_poison, traces_poison
from tests.helpers.brokers import claim_redis_db
from tests.helpers.databases import create_database, drop_database, rows
from tests.helpers.paths import VENV_BIN
from tests.helpers.payloads import make_alert, make_payload
from tests.helpers.processes import Worker, running_worker, stop_process, subprocess_env, wait_until_serving
from tests.helpers.service import API_AUTH, WEBHOOK_AUTH, make_settings
from tests.helpers.slack import CHANNEL, of_incident
from tests.helpers.waiting import wait_for

SERVICE = "vllm"  # the traced service: the `job` label of the helpers' alerts
LLM_TITLE = "written by the fake model"  # a title only the LLM's answer has
LLM_ANSWER = (
    '{"hypotheses": [{"rank": 1, "category": "no_clear_cause", "title": "' + LLM_TITLE + '", "confidence": 0.4, '
    '"evidence": ["queue_median"], "explanation": "Nothing moved before the alert.", "next_steps": ["Watch it."]}]}'
)
SLACK_TIMEOUT = 1.0  # seconds per Slack call
SLACK_MAX_ATTEMPTS = 3

# JSON that parses but is not the protocol's answer, per dependency.
PROMETHEUS_WRONG_SHAPE = {
    "status": "success",
    "data": {"resultType": "matrix", "result": [{"metric": "x", "values": 7}]},
}
JAEGER_WRONG_SHAPE = {"data": [{"traceID": 5, "spans": "none"}, 3], "total": 0, "limit": 0, "offset": 0, "errors": None}
TEMPO_WRONG_SHAPE = {"traces": [{"traceID": 7, "startTimeUnixNano": "soon"}], "tagValues": [{"no": "value"}, 3]}
LLM_WRONG_SHAPE = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m", "choices": "none"}


@dataclass
class Stack:
    db: str
    api: str
    slack: FakeSlack
    prometheus: FaultProxy
    traces: FaultProxy
    llm: FaultProxy
    worker: Worker
    serve_log: Path

    def logs(self) -> str:
        return f"worker:\n{self.worker.output()}\nserve:\n{self.serve_log.read_text(errors='replace')[-2000:]}"


def trace_store() -> Store:
    """Healthy traces of the service from four hours ago to half an hour from now, two a minute."""
    now_us = int(time.time() * 1e6)
    start, end = now_us - 4 * 3600 * 10**6, now_us + 1800 * 10**6
    return Store(traces=TraceFactory(seed=16, service=SERVICE).window(start, end, end, HEALTHY, per_minute=2))


def _service_env(
    db: str,
    broker: str,
    home: Path,
    prometheus: FaultProxy,
    traces: FaultProxy,
    backend: str,
    llm: FaultProxy,
    slack: FakeSlack,
) -> dict[str, str]:
    return subprocess_env(
        database_url=db,
        broker_url=broker,
        data_dir=str(home / "rca-data"),
        log_level="INFO",
        webhook_token=WEBHOOK_AUTH["Authorization"].removeprefix("Bearer "),
        api_tokens=API_AUTH["Authorization"].removeprefix("Bearer "),
        lookback_minutes="30",
        prometheus_url=prometheus.url,
        scan_enabled="false",  # these faults are met by investigations; tests/scan tests the scan
        prometheus_timeout_seconds="1",
        traces_backend=backend,
        traces_url=traces.url,
        traces_timeout_seconds="1",
        traces_budget_seconds="4",
        traces_sample_size="12",
        llm_base_url=f"{llm.url}/v1",
        llm_model="fake-model",
        llm_timeout_seconds="2",
        llm_max_retries="1",
        llm_cache_seconds="0",
        slack_bot_token=TOKEN,
        slack_channel=CHANNEL,
        slack_api_url=slack.api_url,
        slack_timeout_seconds=str(SLACK_TIMEOUT),
        slack_max_attempts=str(SLACK_MAX_ATTEMPTS),
        slack_retry_backoff_seconds="0.2",
        public_url="https://rca.example",
        sweep_interval_seconds="1",
    )


@contextmanager
def dependency_stack(home: Path, traces_backend: str) -> Iterator[Stack]:
    """The service and its faultable dependencies; everything stopped and dropped afterwards."""
    db = create_database()
    broker, redis_client = claim_redis_db(pinned_offset=5)
    with ExitStack() as stack:
        stack.callback(drop_database, db)
        stack.callback(redis_client.close)
        stack.callback(redis_client.flushdb)
        migrate(db)
        prometheus_fake = stack.enter_context(StubPrometheus())
        traces_fake = stack.enter_context(FakeBackend(traces_backend, trace_store()))
        llm_fake = stack.enter_context(FakeLLM(lambda _body: completion(LLM_ANSWER)))
        slack = stack.enter_context(FakeSlack())
        stack.callback(setattr, slack, "delay", 0.0)  # let a hanging request go before the server stops
        for fake in (prometheus_fake, traces_fake, llm_fake):
            deepen_backlog(fake)
        wrong = TEMPO_WRONG_SHAPE if traces_backend == "tempo" else JAEGER_WRONG_SHAPE
        prometheus = stack.enter_context(
            FaultProxy(prometheus_fake.url, "prometheus", PROMETHEUS_WRONG_SHAPE, prometheus_poison, slow_seconds=2.5)
        )
        traces = stack.enter_context(FaultProxy(traces_fake.url, traces_backend, wrong, traces_poison, 2.5))
        llm = stack.enter_context(FaultProxy(llm_fake.base, "llm", LLM_WRONG_SHAPE, llm_poison, slow_seconds=3.0))
        env = _service_env(db, broker, home, prometheus, traces, traces_backend, llm, slack)

        port = free_port()
        serve_log = home / "serve.log"
        with serve_log.open("wb") as sink:
            serve = subprocess.Popen(
                [str(VENV_BIN / "rca"), "serve", "--port", str(port)], cwd=home, env=env, stdout=sink, stderr=sink
            )
        stack.callback(stop_process, serve)
        api = f"http://127.0.0.1:{port}"
        wait_until_serving(api, serve)

        app = create_celery_app(make_settings(db, home, broker_url=broker))
        options = ("--concurrency", "2", "--slack-concurrency", "1")
        worker = stack.enter_context(running_worker(home, env, app, broker, "rca-deps", options, ready_timeout=120))
        yield Stack(db, api, slack, prometheus, traces, llm, worker, serve_log)


@dataclass(frozen=True)
class Accepted:
    incident_id: int
    investigation_id: int


def post_alerts(stack: Stack, label: str, count: int) -> list[Accepted]:
    """`count` new alert groups posted to `rca serve`; each answered 200 and queued."""
    accepted = []
    with httpx.Client(base_url=stack.api, headers=WEBHOOK_AUTH, timeout=10) as client:
        for n in range(count):
            payload = make_payload(f'{{}}:{{alertname="{label}-{n}"}}', alerts=[make_alert(f"fp-{label}-{n}")])
            reply = client.post("/api/v1/alertmanager", json=payload)
            assert reply.status_code == 200 and reply.json()["enqueued"] is True, reply.text
            accepted.append(Accepted(reply.json()["incident_id"], reply.json()["investigation_id"]))
    return accepted


def statuses(stack: Stack, accepted: list[Accepted]) -> list[str]:
    ids = [a.investigation_id for a in accepted]
    return [r.status for r in rows(stack.db, select(InvestigationRow.status).where(InvestigationRow.id.in_(ids)))]


def wait_finished(stack: Stack, accepted: list[Accepted], timeout: float = 40) -> None:
    finished = {InvestigationStatus.DONE, InvestigationStatus.INCONCLUSIVE, InvestigationStatus.FAILED}

    def done() -> bool:
        found = statuses(stack, accepted)
        return len(found) == len(accepted) and all(s in finished for s in found)

    wait_for(done, timeout, f"the investigations to finish\n{stack.logs()}", interval=0.1)


def incident(stack: Stack, incident_id: int) -> dict[str, Any]:
    """The incident as the API shows it: alerts, investigations, findings, hypotheses, Slack."""
    reply = httpx.get(f"{stack.api}/api/v1/incidents/{incident_id}", headers=API_AUTH, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()


def slack_messages(stack: Stack, incident_id: int) -> list[dict[str, Any]]:
    """The payloads of the messages Slack accepted for this incident (not thread replies)."""
    return [r.payload for r in of_incident(stack.slack.posts(), incident_id)]
