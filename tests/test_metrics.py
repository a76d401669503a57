"""The service's own metrics (rca/metrics.py, docs/metrics.md): each moves when its event happens,
on the real parts (PostgreSQL and SQLite, the real Celery worker, the fake Slack and fake LLM);
`/metrics` is guarded like the API; the worker's port sums what its pool children counted.

Counters live for the whole test process, so every check compares a scrape after the event with
one before it."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from celery import Celery
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from rca.analyst import client as llm_client
from rca.analyst.explain import explain
from rca.api.app import create_app
from rca.collect.target import target_from_alerts
from rca.config import ConfigError, TracesConfig, load_settings
from rca.jobs.celery_app import create_app as create_celery_app
from rca.jobs.sweep import sweep
from rca.notify.service import deliver
from rca.pipeline import analyse
from rca.store import tokens
from rca.store.db import get_engine, session_scope
from rca.store.models import IncidentRow, InvestigationRow
from rca.traces.evidence import trace_findings
from tests.e2e.promstack import free_port
from tests.fakes.llm import SURGE_ANSWER, FakeLLM, completion, error, surge_findings, surge_rules, surge_target
from tests.fakes.prometheus import StubPrometheus
from tests.fakes.slack import Failure, FakeSlack
from tests.helpers.databases import CLOSED_PORT_DATABASE_URL
from tests.helpers.paths import REPO, VENV_BIN
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.processes import running_worker, subprocess_env
from tests.helpers.service import API_AUTH, RecordingDispatcher, make_settings, wait_for_investigation
from tests.helpers.slack import slack_settings, store_incident, store_investigation
from tests.helpers.waiting import wait_for

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
CLOSED_PORT_URL = "http://127.0.0.1:1"


def parse(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, parsed by prometheus-client's own parser."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(client: TestClient) -> Samples:
    reply = client.get("/metrics", headers=API_AUTH)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(reply.text)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


@pytest.fixture
def client(db_url: str, tmp_path: Path) -> Iterator[TestClient]:
    """The API on each backend with a dispatcher that only records (investigations stay queued)."""
    with TestClient(create_app(make_settings(db_url, tmp_path), dispatcher=RecordingDispatcher())) as test_client:
        yield test_client


# --------------------------------------------------------------------------- the endpoint


def test_metrics_refuses_without_a_token_and_serves_a_read_token(pg_db: str, tmp_path: Path) -> None:
    with session_scope(pg_db) as session:
        read_token = tokens.create(session, "prometheus", "read")
    with TestClient(create_app(make_settings(pg_db, tmp_path), dispatcher=RecordingDispatcher())) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        reply = client.get("/metrics", headers={"Authorization": f"Bearer {read_token}"})
    assert reply.status_code == 200, reply.text
    samples = parse(reply.text)
    assert value(samples, "rca_build_info", version="0.1.0") == 1
    assert value(samples, "process_resident_memory_bytes") > 0  # the standard process collector
    assert any(name == "python_info" for name, _ in samples)
    for queue in ("investigations", "slack"):  # nothing waits, and the series say so
        assert ("rca_queue_depth", (("queue", queue),)) in samples
        assert value(samples, "rca_queue_depth", queue=queue) == 0
        assert value(samples, "rca_queue_oldest_age_seconds", queue=queue) == 0
    # Series exist at zero before their first event, so rates and alerts see them from the start.
    assert ("rca_webhook_requests_total", (("code", "401"), ("outcome", "unauthorized"))) in samples
    assert ("rca_investigation_duration_seconds_bucket", (("le", "300.0"), ("status", "done"))) in samples
    assert "/metrics" not in client.app.openapi()["paths"]


def test_metrics_are_open_when_the_api_allows_unauthenticated(pg_db: str, tmp_path: Path) -> None:
    settings = make_settings(pg_db, tmp_path, api_tokens="", api_allow_unauthenticated=True)
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        reply = client.get("/metrics")
    assert reply.status_code == 200 and "rca_webhook_requests_total" in reply.text


def test_every_rca_metric_is_documented_and_named_by_the_conventions(pg_db: str, tmp_path: Path) -> None:
    settings = make_settings(pg_db, tmp_path, api_allow_unauthenticated=True)
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        families = list(text_string_to_metric_families(client.get("/metrics").text))
    documented = (REPO / "docs" / "metrics.md").read_text()
    ours = [f for f in families if f.name.startswith("rca_")]
    assert len(ours) == 24
    for family in ours:
        exposed = family.name + ("_total" if family.type == "counter" else "")
        assert f"| `{exposed}` | {family.type} |" in documented, f"{exposed} is not in docs/metrics.md"
        labels = {name for sample in family.samples for name in sample.labels} - {"le"}
        assert not labels & {"incident_id", "investigation_id", "alertname", "url", "group_key"}, exposed


# --------------------------------------------------------------------------- intake


def test_every_webhook_answer_is_counted_by_outcome_and_code(client: TestClient) -> None:
    before = scrape(client)
    assert post_webhook(client, make_payload("g-metrics", alerts=[make_alert("fp-1")])).status_code == 200
    assert post_webhook(client, make_payload("g-metrics", alerts=[make_alert("fp-1")])).status_code == 200
    assert post_webhook(client, make_payload("g-metrics"), headers={}).status_code == 401
    assert post_webhook(client, {"version": "4"}).status_code == 422
    assert (
        client.post(
            "/api/v1/alertmanager",
            content=b"{not json",
            headers={"Authorization": "Bearer webhook-secret-for-tests", "Content-Type": "application/json"},
        ).status_code
        == 400
    )
    too_big = b" " * (client.app.state.settings.webhook_max_body_bytes + 1)
    assert (
        client.post(
            "/api/v1/alertmanager", content=too_big, headers={"Authorization": "Bearer webhook-secret-for-tests"}
        ).status_code
        == 413
    )
    after = scrape(client)

    counted = {
        (outcome, code): moved(before, after, "rca_webhook_requests_total", outcome=outcome, code=code)
        for outcome, code in [
            ("stored", "200"),
            ("unauthorized", "401"),
            ("invalid", "422"),
            ("not_json", "400"),
            ("too_large", "413"),
            ("database_unavailable", "503"),
        ]
    }
    assert counted == {
        ("stored", "200"): 2,
        ("unauthorized", "401"): 1,
        ("invalid", "422"): 1,
        ("not_json", "400"): 1,
        ("too_large", "413"): 1,
        ("database_unavailable", "503"): 0,
    }
    assert moved(before, after, "rca_incidents_opened_total") == 1  # the second notice joined the incident


def test_an_unexpected_webhook_failure_counts_as_error(pg_db: str, tmp_path: Path) -> None:
    class Exploding(RecordingDispatcher):
        def enqueue(self, investigation_id: int) -> bool:
            raise RuntimeError("a bug after the commit")

    settings = make_settings(pg_db, tmp_path)
    with TestClient(create_app(settings, dispatcher=Exploding()), raise_server_exceptions=False) as client:
        before = scrape(client)
        assert post_webhook(client, make_payload("g-bug")).status_code == 500
        after = scrape(client)
    assert moved(before, after, "rca_webhook_requests_total", outcome="error", code="500") == 1
    assert moved(before, after, "rca_webhook_requests_total", outcome="stored", code="200") == 0


def test_a_webhook_refused_for_a_down_database_counts_as_database_unavailable(tmp_path: Path) -> None:
    settings = make_settings(CLOSED_PORT_DATABASE_URL, tmp_path, api_allow_unauthenticated=True)
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        before = parse(client.get("/metrics").text)
        assert post_webhook(client, make_payload("g-down")).status_code == 503
        reply = client.get("/metrics")
    assert reply.status_code == 200  # the queue gauge is left out, the rest still served
    after = parse(reply.text)
    assert moved(before, after, "rca_webhook_requests_total", outcome="database_unavailable", code="503") == 1
    assert not any(name.startswith("rca_queue_") for name, _ in after)


# --------------------------------------------------------------------------- the queue


def test_queue_age_is_the_oldest_queued_investigation_and_zero_once_it_runs(client: TestClient, db_url: str) -> None:
    reply = post_webhook(client, make_payload("g-queued", alerts=[make_alert("fp-q")]))
    investigation_id = reply.json()["investigation_id"]
    post_webhook(client, make_payload("g-queued-too", alerts=[make_alert("fp-q2")]))
    with get_engine(db_url).begin() as conn:  # queued two minutes ago by some other process
        conn.execute(
            update(InvestigationRow)
            .where(InvestigationRow.id == investigation_id)
            .values(queued_at=datetime.now(UTC) - timedelta(seconds=120))
        )

    samples = scrape(client)
    assert 120 <= value(samples, "rca_queue_oldest_age_seconds", queue="investigations") < 150
    assert value(samples, "rca_queue_depth", queue="investigations") == 2

    with get_engine(db_url).begin() as conn:
        conn.execute(update(InvestigationRow).values(status="running"))
    samples = scrape(client)
    assert value(samples, "rca_queue_oldest_age_seconds", queue="investigations") == 0
    assert value(samples, "rca_queue_depth", queue="investigations") == 0


def test_the_slack_queue_is_the_notices_owed_and_how_long_the_oldest_has_waited(
    client: TestClient, db_url: str
) -> None:
    ids = [post_webhook(client, make_payload(f"g-owed-{n}")).json()["incident_id"] for n in range(3)]
    with get_engine(db_url).begin() as conn:  # two owed, the older for 90 s; the third up to date
        for incident_id, since in zip(ids, (90, 10, None), strict=True):
            owed_since = datetime.now(UTC) - timedelta(seconds=since) if since is not None else None
            conn.execute(update(IncidentRow).where(IncidentRow.id == incident_id).values(slack_owed_since=owed_since))
    samples = scrape(client)
    assert value(samples, "rca_queue_depth", queue="slack") == 2
    assert 90 <= value(samples, "rca_queue_oldest_age_seconds", queue="slack") < 120


def test_the_sweeper_counts_what_it_reenqueues(client: TestClient, db_url: str, tmp_path: Path) -> None:
    ids = [
        post_webhook(client, make_payload(f"g-stranded-{n}", alerts=[make_alert(f"fp-s{n}")])).json()[
            "investigation_id"
        ]
        for n in range(2)
    ]
    before = scrape(client)
    assert sorted(sweep(make_settings(db_url, tmp_path), timedelta(0)).requeued) == sorted(ids)
    assert sweep(make_settings(db_url, tmp_path), timedelta(seconds=30)).requeued == []  # just re-queued: not again
    assert moved(before, scrape(client), "rca_sweeper_reenqueued_total") == 2


# --------------------------------------------------------------------------- investigations (embedded)


def test_an_embedded_investigation_counts_as_done_with_its_duration(
    pg_db: str, tmp_path: Path, prometheus: StubPrometheus
) -> None:
    settings = make_settings(pg_db, tmp_path, prometheus_url=prometheus.url)
    with TestClient(create_app(settings)) as client:  # no broker: investigations run in this process
        before = scrape(client)
        reply = post_webhook(client, make_payload("g-done", alerts=[make_alert("fp-d")]))
        inv = wait_for_investigation(client, reply.json()["incident_id"])["investigation"]
        after = scrape(client)
    assert inv["status"] == "done", inv["error"]
    assert moved(before, after, "rca_investigations_total", status="done") == 1
    assert moved(before, after, "rca_investigation_duration_seconds_count", status="done") == 1
    # The same measurement the investigation stores (rounded there to 0.1 ms).
    assert moved(before, after, "rca_investigation_duration_seconds_sum", status="done") == pytest.approx(
        inv["total_seconds"], abs=1e-3
    )
    assert moved(before, after, "rca_investigation_duration_seconds_bucket", status="done", le="300.0") == 1
    assert moved(before, after, "rca_investigations_total", status="failed") == 0


def test_an_investigation_that_fails_counts_as_failed(
    pg_db: str, tmp_path: Path, prometheus: StubPrometheus, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("a bug in a stage")

    monkeypatch.setattr("rca.pipeline.analyse", broken)
    with TestClient(create_app(make_settings(pg_db, tmp_path, prometheus_url=prometheus.url))) as client:
        before = scrape(client)
        reply = post_webhook(client, make_payload("g-fail", alerts=[make_alert("fp-f")]))
        inv = wait_for_investigation(client, reply.json()["incident_id"])["investigation"]
        after = scrape(client)
    assert inv["status"] == "failed" and "a bug in a stage" in inv["error"]
    assert moved(before, after, "rca_investigations_total", status="failed") == 1
    assert moved(before, after, "rca_investigation_duration_seconds_count", status="failed") == 1
    assert moved(before, after, "rca_investigations_total", status="done") == 0


def test_a_blind_investigation_counts_as_inconclusive_with_its_reason_never_as_done(pg_db: str, tmp_path: Path) -> None:
    """Issue 32.1: with no Prometheus the metrics counted a blind investigation `done`."""
    with TestClient(create_app(make_settings(pg_db, tmp_path))) as client:  # no RCA_PROMETHEUS_URL
        before = scrape(client)
        assert ("rca_investigations_inconclusive_total", (("reason", "no_data"),)) in before  # at zero from the start
        reply = post_webhook(client, make_payload("g-blind", alerts=[make_alert("fp-b")]))
        inv = wait_for_investigation(client, reply.json()["incident_id"])["investigation"]
        after = scrape(client)
    assert inv["status"] == "inconclusive", inv
    assert moved(before, after, "rca_investigations_total", status="inconclusive") == 1
    assert moved(before, after, "rca_investigations_inconclusive_total", reason="no_prometheus") == 1
    assert moved(before, after, "rca_investigation_duration_seconds_count", status="inconclusive") == 1
    assert moved(before, after, "rca_investigations_total", status="done") == 0
    assert moved(before, after, "rca_investigations_inconclusive_total", reason="prometheus_unreachable") == 0


# --------------------------------------------------------------------------- Prometheus and traces


class Refusing(StubPrometheus):
    """A Prometheus that answers every query 400 (a bad query, say)."""

    def __init__(self) -> None:
        super().__init__()
        handler = self.server.RequestHandlerClass

        def refuse(request: Any) -> None:
            request.send_error(400, "bad_data")

        handler.do_GET = handler.do_POST = refuse  # type: ignore[attr-defined]


def collect_with(prometheus_url: str, tmp_path: Path) -> None:
    settings = load_settings(
        prometheus_url=prometheus_url, prometheus_timeout_seconds=2, data_dir=tmp_path / "rca-data"
    )
    target = target_from_alerts(
        [{"instance": "gpu-node-1:8000", "job": "vllm"}], [datetime.now(UTC)], settings.file_config().target
    )
    analyse(settings, target)


def test_failed_prometheus_queries_are_counted_by_reason(client: TestClient, tmp_path: Path) -> None:
    before = scrape(client)
    collect_with(CLOSED_PORT_URL, tmp_path)
    with Refusing() as refusing:
        collect_with(refusing.url, tmp_path)
    after = scrape(client)
    assert moved(before, after, "rca_prometheus_query_errors_total", reason="refused") >= 1
    assert moved(before, after, "rca_prometheus_query_errors_total", reason="http_status") >= 1
    assert moved(before, after, "rca_prometheus_query_errors_total", reason="timeout") == 0


def test_failed_trace_queries_are_counted_by_backend_and_reason(client: TestClient, tmp_path: Path) -> None:
    settings = load_settings(traces_backend="tempo", traces_url=CLOSED_PORT_URL, traces_timeout_seconds=2)
    now = datetime.now(UTC)
    before = scrape(client)
    findings = trace_findings(settings, TracesConfig(), [{"service": "vllm"}], now, now - timedelta(hours=1), now)
    after = scrape(client)
    assert all(f.status == "unavailable" for f in findings)
    assert moved(before, after, "rca_trace_query_errors_total", backend="tempo", reason="connection") == 1
    assert moved(before, after, "rca_trace_query_errors_total", backend="jaeger", reason="connection") == 0


# --------------------------------------------------------------------------- the LLM


def test_llm_requests_tokens_and_cost_are_counted(client: TestClient) -> None:
    llm_client.forget_modes()
    answers = iter([error(503, "overloaded", "server_error"), completion(SURGE_ANSWER, completion_tokens=120)])
    with FakeLLM(lambda _request: next(answers)) as fake:
        settings = load_settings(
            llm_base_url=fake.base_url,
            llm_model="fake-model",
            llm_timeout_seconds=10,
            llm_price_per_1k_prompt_tokens=0.5,
            llm_price_per_1k_completion_tokens=1.5,
        )
        before = scrape(client)
        record = explain(settings, surge_target(), surge_findings(), surge_rules()).record
        after = scrape(client)
    assert record.analyst == "llm" and record.completion_tokens == 120 and record.prompt_tokens > 0
    assert moved(before, after, "rca_llm_requests_total", outcome="http_status") == 1  # the 503, retried
    assert moved(before, after, "rca_llm_requests_total", outcome="ok") == 1
    assert moved(before, after, "rca_llm_tokens_total", kind="prompt") == record.prompt_tokens
    assert moved(before, after, "rca_llm_tokens_total", kind="completion") == 120
    assert moved(before, after, "rca_llm_cost_dollars_total") == pytest.approx(record.estimated_cost)
    assert record.estimated_cost > 0


# --------------------------------------------------------------------------- Slack


def test_slack_posts_and_failures_are_counted(client: TestClient, db_url: str, tmp_path: Path) -> None:
    with FakeSlack() as slack:
        settings = slack_settings(db_url, tmp_path, slack)
        posted = store_incident(db_url)
        store_investigation(db_url, posted, ["queue_median"], ["arrival_surge"])
        refused = store_incident(db_url)
        store_investigation(db_url, refused, ["queue_median"], ["arrival_surge"])
        before = scrape(client)
        assert deliver(settings, posted, "investigation").status == "delivered"
        slack.fail_next(Failure(404, error="channel_not_found"))
        assert deliver(settings, refused, "investigation").status == "failed"
        slack.fail_next(Failure(429, retry_after=1, error="ratelimited"))
        assert deliver(settings, refused, "investigation").status == "retrying"
        after = scrape(client)
    assert moved(before, after, "rca_slack_deliveries_total", outcome="posted") == 1
    assert moved(before, after, "rca_slack_delivery_failures_total", reason="rejected") == 1
    assert moved(before, after, "rca_slack_delivery_failures_total", reason="rate_limited") == 1
    assert (
        sum(
            moved(before, after, "rca_slack_delivery_failures_total", reason=r)
            for r in ("server_error", "auth", "timeout", "network")
        )
        == 0
    )


# --------------------------------------------------------------------------- the Celery worker


def worker_env(
    home: Path, pg_db: str, redis_url: str, prometheus: StubPrometheus, metrics_port: int
) -> tuple[dict[str, str], Celery]:
    """The environment of an `rca worker` in `home` serving its metrics from `metrics_port`, and a
    Celery client of its broker."""
    env = subprocess_env(
        broker_url=redis_url,
        database_url=pg_db,
        prometheus_url=prometheus.url,
        data_dir=str(home / "rca-data"),
        worker_metrics_port=str(metrics_port),
    )
    return env, create_celery_app(make_settings(pg_db, home, broker_url=redis_url))


def test_the_worker_port_serves_what_its_pool_children_counted(
    pg_db: str, redis_url: str, tmp_path: Path, prometheus: StubPrometheus
) -> None:
    """Investigations run in the prefork children, never in the worker's main process, which
    serves the port: each count below crossed from a child through PROMETHEUS_MULTIPROC_DIR."""
    home = tmp_path / "worker"
    stale = home / "rca-data" / "worker-metrics" / "counter_4242.db"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"left by an earlier run")  # not a valid mmap file: the worker must clear it
    port = free_port()
    env, app = worker_env(home, pg_db, redis_url, prometheus, port)
    settings = make_settings(pg_db, tmp_path, broker_url=redis_url, prometheus_url=prometheus.url)
    with running_worker(home, env, app, redis_url, "rca-metrics") as worker, TestClient(create_app(settings)) as api:
        assert not stale.exists()
        url = f"http://127.0.0.1:{port}/metrics"
        before = parse(httpx.get(url, timeout=5).text)
        for n in range(2):
            reply = post_webhook(api, make_payload(f"g-worker-{n}", alerts=[make_alert(f"fp-w{n}")]))
            assert reply.json()["enqueued"] is True, reply.text
            assert wait_for_investigation(api, reply.json()["incident_id"])["investigation"]["status"] == "done"
        with get_engine(pg_db).begin() as conn:  # as if its enqueue had been lost
            conn.execute(
                update(InvestigationRow)
                .where(InvestigationRow.id == reply.json()["investigation_id"])
                .values(status="queued", queued_at=datetime.now(UTC) - timedelta(minutes=5))
            )
        worker.app.send_task("rca.sweep")

        def swept() -> Samples | None:
            samples = parse(httpx.get(url, timeout=5).text)
            return samples if moved(before, samples, "rca_investigations_total", status="done") >= 3 else None

        after = wait_for(swept, 30, f"the swept investigation to be counted\n{worker.output()}")
    assert moved(before, after, "rca_sweeper_reenqueued_total") == 1
    assert moved(before, after, "rca_investigation_duration_seconds_count", status="done") == 3
    assert value(after, "rca_build_info", version="0.1.0") == 1
    assert value(after, "process_resident_memory_bytes") > 0  # the main process's own
    assert not any(name.startswith("rca_queue_") for name, _ in after)  # the API serves them, once


def test_worker_metrics_settings_are_checked(tmp_path: Path, pg_url: str, redis_url: str) -> None:
    with pytest.raises(ConfigError, match="RCA_WORKER_METRICS_PORT"):
        load_settings(worker_metrics_port=70000)
    assert load_settings(worker_metrics_port=0).worker_metrics_port == 0  # off
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = subprocess_env(
            broker_url=redis_url,
            database_url=pg_url,
            data_dir=str(tmp_path / "rca-data"),
            worker_metrics_port=str(port),
            worker_metrics_ports="1",
            log_level="WARNING",
        )
        result = subprocess.run(
            [str(VENV_BIN / "rca"), "worker"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(
        f"error: RCA_WORKER_METRICS_PORT: no free port on 127.0.0.1 among {port}-{port}:"
        f" {port} (Address already in use)"
    ), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _free_pair() -> int:
    """A port whose next one is free too."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two free consecutive ports on 127.0.0.1")


def test_workers_sharing_a_host_take_the_next_metrics_port_and_keep_their_own_counts(
    pg_db: str, redis_url: str, tmp_path: Path, prometheus: StubPrometheus
) -> None:
    """Two `rca worker` on one host, same RCA_DATA_DIR and settings, beside a port held by
    something else: the first takes the port after it, the second the one after that, each with
    its own multiprocess directory (the second empties none of the first's)."""
    home = tmp_path / "worker"
    home.mkdir()
    foreign = _free_pair()
    with socket.socket() as held:
        held.bind(("127.0.0.1", foreign))
        held.listen()
        second = foreign + 2
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", second))  # free too, or the test's premise fails here
        env, app = worker_env(home, pg_db, redis_url, prometheus, foreign)
        with (
            running_worker(home, env, app, redis_url, "rca-one", log_name="one.log") as one,
            running_worker(home, env, app, redis_url, "rca-two", log_name="two.log") as two,
        ):
            served = {}
            for port in (foreign + 1, second):
                served[port] = parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
                assert value(served[port], "rca_build_info", version="0.1.0") == 1, one.output() + two.output()
            assert {d.name for d in (home / "rca-data").iterdir() if d.is_dir()} == {
                f"worker-metrics-{foreign + 1}",
                f"worker-metrics-{second}",
            }
            # the second's start emptied only its own: the first's counters are still on disk
            assert list((home / "rca-data" / f"worker-metrics-{foreign + 1}").glob("*.db"))
