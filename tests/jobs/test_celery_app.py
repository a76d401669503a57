"""A real Celery worker (`rca worker`) on Redis and PostgreSQL: webhook to finished
investigation, idempotent redelivery, and investigations stranded by a broker outage."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from rca.api.app import create_app
from rca.collect.profile import DEFAULT_PROFILE, load_profile
from rca.jobs.celery_app import create_app as create_celery_app
from rca.jobs.dispatch import CeleryDispatcher
from rca.jobs.sweep import sweep
from rca.signals.slo import KEY as SLO_KEY
from rca.store.db import get_engine
from rca.store.models import FindingRow, HypothesisRow, InvestigationRow
from rca.traces.findings import SUMMARY_KEY as TRACES_KEY
from tests.fakes.prometheus import StubPrometheus
from tests.helpers.brokers import CLOSED_PORT_BROKER_URL
from tests.helpers.databases import count_for, investigation_rows, rows
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.processes import Worker, running_worker, subprocess_env
from tests.helpers.service import make_settings, wait_for_investigation
from tests.helpers.waiting import wait_for

FINDING_IDS = {spec.id for spec in load_profile(DEFAULT_PROFILE).signals} | {SLO_KEY, TRACES_KEY}
# Container (cAdvisor) signals: the test alert names no pod, so these have no selector.
POD_ONLY_IDS = {
    spec.id
    for spec in load_profile(DEFAULT_PROFILE).signals
    if spec.scope == "pod" and all(q.scope in (None, "pod") for q in spec.queries)
}


@pytest.fixture(scope="module")
def worker(
    pg_url: str, redis_url: str, prometheus: StubPrometheus, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Worker]:
    """`rca worker --no-beat --concurrency 1` as a child process, stopped by its pid afterwards."""
    home = tmp_path_factory.mktemp("worker")
    env = subprocess_env(
        broker_url=redis_url,
        database_url=pg_url,
        prometheus_url=prometheus.url,
        data_dir=str(home / "rca-data"),
        log_level="INFO",
    )
    app = create_celery_app(make_settings(pg_url, home, broker_url=redis_url))
    with running_worker(home, env, app, redis_url, "rca-test") as handle:
        yield handle


def investigation(url: str, investigation_id: int) -> Any:
    [row] = rows(url, select(InvestigationRow.__table__).where(InvestigationRow.id == investigation_id))
    return row


def stored_results(url: str, investigation_id: int) -> tuple[list[Any], list[Any]]:
    findings = rows(url, select(FindingRow.id, FindingRow.key).where(FindingRow.investigation_id == investigation_id))
    hypotheses = rows(
        url, select(HypothesisRow.id, HypothesisRow.rank).where(HypothesisRow.investigation_id == investigation_id)
    )
    return findings, hypotheses


def run_one_more_through_the_queue(client: TestClient, label: str) -> None:
    """The worker consumes one message at a time in order: once a later investigation is done,
    every task sent before it has been handled."""
    reply = post_webhook(client, make_payload(f"sentinel-{label}", alerts=[make_alert(f"fp-{label}")]))
    assert reply.status_code == 200 and reply.json()["enqueued"] is True, reply.text
    done = wait_for_investigation(client, reply.json()["incident_id"])
    assert done["investigation"]["status"] == "done"


@pytest.fixture
def celery_client(
    pg_db: str, redis_url: str, prometheus: StubPrometheus, tmp_path: Path, worker: Worker
) -> Iterator[TestClient]:
    """The API with its real Celery dispatcher, on the worker's broker and database."""
    settings = make_settings(pg_db, tmp_path, broker_url=redis_url, prometheus_url=prometheus.url)
    with TestClient(create_app(settings)) as client:
        yield client


def test_webhook_investigation_runs_on_the_celery_worker_to_done(celery_client: TestClient, pg_db: str) -> None:
    reply = post_webhook(celery_client, make_payload("worker", alerts=[make_alert("fp-w", model_name="llama")]))
    assert reply.status_code == 200, reply.text
    assert reply.json()["enqueued"] is True

    incident = wait_for_investigation(celery_client, reply.json()["incident_id"])

    inv = incident["investigation"]
    assert inv["status"] == "done", inv["error"]
    assert inv["id"] == reply.json()["investigation_id"] and inv["attempts"] == 1
    assert inv["target"]["host"] == "gpu-node-1"
    assert {f["id"] for f in inv["findings"]} == FINDING_IDS
    assert all(
        f["query"] and f["status"] in ("ok", "breached")
        for f in inv["findings"]
        if f["id"] not in POD_ONLY_IDS | {TRACES_KEY}
    )
    assert all(f["status"] == "unavailable" for f in inv["findings"] if f["id"] in POD_ONLY_IDS)
    assert inv["hypotheses"] and inv["hypotheses"][0]["rank"] == 1
    findings, hypotheses = stored_results(pg_db, inv["id"])
    assert len(findings) == len(FINDING_IDS) and len(hypotheses) == len(inv["hypotheses"])


def test_redelivered_finished_investigation_is_left_untouched(
    celery_client: TestClient, pg_db: str, worker: Worker
) -> None:
    reply = post_webhook(celery_client, make_payload("redeliver", alerts=[make_alert("fp-r")]))
    investigation_id = reply.json()["investigation_id"]
    wait_for_investigation(celery_client, reply.json()["incident_id"])
    before = investigation(pg_db, investigation_id)
    results_before = stored_results(pg_db, investigation_id)

    for _ in range(2):
        worker.app.send_task("rca.investigate", args=[investigation_id])
    run_one_more_through_the_queue(celery_client, "after-redelivery")

    after = investigation(pg_db, investigation_id)
    assert after.status == "done"
    assert (after.attempts, after.finished_at) == (before.attempts, before.finished_at)
    assert stored_results(pg_db, investigation_id) == results_before


def test_investigation_delivered_twice_before_finishing_stores_its_results_once(
    celery_client: TestClient, pg_db: str, worker: Worker
) -> None:
    reply = post_webhook(celery_client, make_payload("twice", alerts=[make_alert("fp-t")]))
    investigation_id = reply.json()["investigation_id"]
    wait_for_investigation(celery_client, reply.json()["incident_id"])
    old_findings, old_hypotheses = stored_results(pg_db, investigation_id)
    # As if the worker died after claiming it: back to queued, with the earlier results still stored.
    with get_engine(pg_db).begin() as conn:
        conn.execute(
            update(InvestigationRow)
            .where(InvestigationRow.id == investigation_id)
            .values(status="queued", finished_at=None)
        )

    for _ in range(2):
        worker.app.send_task("rca.investigate", args=[investigation_id])
    run_one_more_through_the_queue(celery_client, "after-double-delivery")

    after = investigation(pg_db, investigation_id)
    assert after.status == "done" and after.attempts == 2  # the second delivery found it done
    findings, hypotheses = stored_results(pg_db, investigation_id)
    assert sorted(key for _, key in findings) == sorted(FINDING_IDS)
    assert [rank for _, rank in hypotheses] == list(range(1, len(old_hypotheses) + 1))
    assert {fid for fid, _ in findings}.isdisjoint(fid for fid, _ in old_findings)  # replaced, not added


def store_with_broker_down(db_url: str, tmp_path: Path) -> dict[str, Any]:
    settings = make_settings(db_url, tmp_path, broker_url=CLOSED_PORT_BROKER_URL)
    with TestClient(create_app(settings)) as client:
        reply = post_webhook(client, make_payload("stranded", alerts=[make_alert("fp-s")]))
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["created"] is True and body["investigation_id"] is not None
    assert body["enqueued"] is False
    assert investigation(db_url, body["investigation_id"]).status == "queued"
    return body


def test_broker_outage_strands_nothing_the_sweep_hands_it_to_the_worker(
    pg_db: str, redis_url: str, prometheus: StubPrometheus, tmp_path: Path, worker: Worker
) -> None:
    stranded = store_with_broker_down(pg_db, tmp_path)
    investigation_id = stranded["investigation_id"]
    settings = make_settings(pg_db, tmp_path, broker_url=redis_url, prometheus_url=prometheus.url)

    assert sweep(settings, timedelta(minutes=5)).requeued == []  # too recent to count as stranded
    queued_at = investigation(pg_db, investigation_id).queued_at
    assert sweep(settings, timedelta(0)).requeued == [investigation_id]
    assert investigation(pg_db, investigation_id).queued_at > queued_at  # re-queued now...
    assert sweep(settings, timedelta(seconds=30)).requeued == []  # ...so the next sweep leaves it alone

    dispatcher = CeleryDispatcher(settings)
    try:
        assert dispatcher.enqueue(investigation_id) is True
    finally:
        dispatcher.close()
    wait_for(lambda: investigation(pg_db, investigation_id).status == "done", 30, "the swept investigation")
    assert count_for(pg_db, FindingRow, investigation_id=investigation_id) == len(FINDING_IDS)
    assert count_for(pg_db, HypothesisRow, investigation_id=investigation_id) >= 1


def test_sweep_task_on_the_worker_reenqueues_stranded_investigations(
    pg_db: str, tmp_path: Path, worker: Worker
) -> None:
    stranded = store_with_broker_down(pg_db, tmp_path)
    investigation_id = stranded["investigation_id"]
    with get_engine(pg_db).begin() as conn:  # the worker's sweep waits sweep_after_seconds (60 s)
        conn.execute(
            update(InvestigationRow)
            .where(InvestigationRow.id == investigation_id)
            .values(queued_at=datetime.now(UTC) - timedelta(minutes=2))
        )

    worker.app.send_task("rca.sweep")

    wait_for(
        lambda: investigation(pg_db, investigation_id).status == "done",
        30,
        f"the worker's sweep to run investigation {investigation_id}\n{worker.output()}",
    )
    [row] = investigation_rows(pg_db)
    assert row.attempts == 1 and row.error is None
    assert count_for(pg_db, FindingRow, investigation_id=investigation_id) == len(FINDING_IDS)


def test_broker_down_answers_the_webhook_promptly(pg_db: str, tmp_path: Path) -> None:
    """Alertmanager waits for the answer; an unreachable broker must not hold it for long."""
    import time

    settings = make_settings(pg_db, tmp_path, broker_url=CLOSED_PORT_BROKER_URL)
    with TestClient(create_app(settings)) as client:
        started = time.monotonic()
        reply = post_webhook(client, make_payload("prompt", alerts=[make_alert("fp-p")]))
        elapsed = time.monotonic() - started
    assert reply.status_code == 200 and reply.json()["enqueued"] is False
    assert elapsed < 3, f"the webhook took {elapsed:.1f} s with the broker down"
