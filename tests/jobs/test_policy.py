"""The retry policy of the jobs (`rca.jobs.policy`): its total backoff outlasts a database failover,
and an investigation outlives an outage of PostgreSQL on the real worker and in the embedded
runner alike."""

from __future__ import annotations

import logging
import random
import re
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import make_url, select

from rca.api.app import create_app
from rca.jobs.celery_app import create_app as create_celery_app
from rca.jobs.inline import InlineDispatcher
from rca.jobs.policy import JOB_RETRIES
from rca.store.models import InvestigationRow
from tests.fakes.prometheus import StubPrometheus
from tests.helpers.brokers import claim_redis_db
from tests.helpers.databases import rows
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.processes import running_worker, subprocess_env
from tests.helpers.service import RecordingDispatcher, make_settings, wait_for_investigation
from tests.helpers.tcpproxy import TcpProxy
from tests.helpers.waiting import wait_for


def test_the_retries_outlast_a_minute_long_outage_whatever_the_jitter() -> None:
    assert JOB_RETRIES.min_total > 60
    rng = random.Random(16)
    for _ in range(2000):
        delays = [JOB_RETRIES.delay(n, rng) for n in range(JOB_RETRIES.max_retries)]
        assert sum(delays) > 60
        assert JOB_RETRIES.min_total <= sum(delays) <= JOB_RETRIES.max_total
        assert all(0 < d <= JOB_RETRIES.backoff.cap for d in delays)


def test_the_backoff_grows_exponentially_from_two_seconds_to_its_cap() -> None:
    lowest = [JOB_RETRIES.delay(n, random.Random(0)) for n in range(12)]
    assert 1 <= lowest[0] <= 2 and 2 <= lowest[1] <= 4 and 4 <= lowest[2] <= 8
    assert all(30 <= d <= JOB_RETRIES.backoff.cap for d in lowest[5:])
    # A 15 s outage is outlasted by the first five retries, however the jitter falls.
    assert sum(JOB_RETRIES.backoff.ceiling(n) / 2 for n in range(5)) >= 15


def test_an_investigation_outlasts_a_15_s_database_outage_on_the_real_worker(
    pg_db: str, prometheus: StubPrometheus, tmp_path: Path
) -> None:
    """The worker reaches PostgreSQL through a proxy that cuts it off for 15 s, from before the
    task arrives: the task retries with the policy's backoff and finishes once the database is back."""
    broker, client = claim_redis_db(pinned_offset=4)
    target = make_url(pg_db)
    with TcpProxy(target.host or "127.0.0.1", target.port or 5432) as proxy:
        proxied = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        env = subprocess_env(
            broker_url=broker,
            database_url=proxied,
            prometheus_url=prometheus.url,
            data_dir=str(tmp_path / "rca-data"),
            log_level="INFO",
        )
        app = create_celery_app(make_settings(pg_db, tmp_path, broker_url=broker))
        settings = make_settings(pg_db, tmp_path, broker_url=broker, prometheus_url=prometheus.url)
        try:
            with (
                running_worker(tmp_path, env, app, broker, "rca-outage") as worker,
                TestClient(create_app(settings)) as api,
            ):
                proxy.outage()
                reply = post_webhook(api, make_payload("outage", alerts=[make_alert("fp-outage")])).json()
                assert reply["enqueued"] is True
                time.sleep(15)
                assert "Retry in" in worker.log.read_text(), worker.output()
                proxy.restore()
                wait_for_investigation(api, reply["incident_id"], timeout=45)
                [row] = rows(
                    pg_db,
                    select(InvestigationRow.status, InvestigationRow.attempts).where(
                        InvestigationRow.id == reply["investigation_id"]
                    ),
                )
                assert (row.status, row.attempts) == ("done", 1), worker.output()
        finally:
            client.flushdb()
            client.close()


def test_an_embedded_investigation_outlasts_a_database_outage_as_the_worker_does(
    pg_db: str, prometheus: StubPrometheus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The in-process runner of `rca serve` reaches PostgreSQL through a proxy that is cut off from
    before the investigation starts: as on the worker, it retries with the policy's backoff (the
    investigation stays queued meanwhile, never `failed`) and finishes once the database is back,
    in one attempt."""
    caplog.set_level(logging.WARNING, logger="rca.jobs")
    target = make_url(pg_db)
    settings = make_settings(pg_db, tmp_path, prometheus_url=prometheus.url)
    intake = RecordingDispatcher()
    with (
        TcpProxy(target.host or "127.0.0.1", target.port or 5432) as proxy,
        TestClient(create_app(settings, intake)) as api,
    ):
        reply = post_webhook(api, make_payload("embedded-outage", alerts=[make_alert("fp-embedded")])).json()
        proxied = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        proxy.outage()
        runner = InlineDispatcher(make_settings(proxied, tmp_path, prometheus_url=prometheus.url))
        try:
            runner.enqueue(reply["investigation_id"])
            retries = wait_for(lambda: len(retried(caplog)) >= 2 and retried(caplog), 20, "two retries")
            [row] = rows(pg_db, select(InvestigationRow.status).where(InvestigationRow.id == reply["investigation_id"]))
            assert row.status == "queued"
            proxy.restore()
            wait_for_investigation(api, reply["incident_id"], timeout=45)
        finally:
            runner.close()
    [row] = rows(
        pg_db,
        select(InvestigationRow.status, InvestigationRow.attempts).where(
            InvestigationRow.id == reply["investigation_id"]
        ),
    )
    assert (row.status, row.attempts) == ("done", 1)
    # The worker's backoff: retry n + 1 waits between half and all of the policy's ceiling.
    for number, of, delay in retries[:2]:
        assert of == JOB_RETRIES.max_retries
        assert JOB_RETRIES.backoff.ceiling(number - 1) / 2 <= delay <= JOB_RETRIES.backoff.ceiling(number - 1)


def retried(caplog: pytest.LogCaptureFixture) -> list[tuple[int, int, float]]:
    """The retries the runner logged: (retry number, out of how many, seconds waited)."""
    found = (re.search(r"retry (\d+) of (\d+) in ([\d.]+) s", r.getMessage()) for r in caplog.records)
    return [(int(m[1]), int(m[2]), float(m[3])) for m in found if m]
