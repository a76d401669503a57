"""`rca worker` as processes (rca/cli/worker.py, rca/jobs/beat.py, rca/jobs/runner.py), on the real Redis
and PostgreSQL: Slack deliveries on a pool of their own, so that a hanging Slack does not slow
investigations; one scheduler at a time, which dies with its worker. (A worker killed with -9
mid-investigation, taken over within a minute and posted once: tests/faults/test_worker_kills.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from rca.api.app import create_app
from rca.jobs.celery_app import create_app as create_celery_app
from rca.store.models import InvestigationRow
from tests.fakes.prometheus import StubPrometheus
from tests.fakes.slack import TOKEN, FakeSlack
from tests.helpers.brokers import claim_redis_db
from tests.helpers.databases import rows
from tests.helpers.paths import VENV_BIN
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.processes import alive, child_pids, running_worker, stop_process, subprocess_env
from tests.helpers.slack import CHANNEL, slack_settings
from tests.helpers.waiting import wait_for

WARM_UP, BATCH = 6, 10  # investigations
SLACK_TIMEOUT = 5  # seconds


@pytest.fixture
def broker() -> Iterator[str]:
    url, client = claim_redis_db(pinned_offset=3)
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake
        fake.delay = 0.0  # let a hanging request go before the server stops


@pytest.fixture
def stub_prometheus() -> Iterator[StubPrometheus]:
    with StubPrometheus() as stub:
        yield stub
        stub.delay = 0.0


def worker_env(
    db: str, broker: str, home: Path, prometheus: StubPrometheus, slack: FakeSlack, **rca: str
) -> dict[str, str]:
    return subprocess_env(
        broker_url=broker,
        database_url=db,
        prometheus_url=prometheus.url,
        data_dir=str(home / "rca-data"),
        log_level="INFO",
        slack_bot_token=TOKEN,
        slack_channel=CHANNEL,
        slack_api_url=slack.api_url,
        slack_retry_backoff_seconds="0.2",
        public_url="https://rca.example",
        **rca,
    )


def statuses(db: str, ids: list[int]) -> list[str]:
    return [r.status for r in rows(db, select(InvestigationRow.status).where(InvestigationRow.id.in_(ids)))]


def investigate_batch(api: TestClient, db: str, label: str, count: int) -> float:
    """Post `count` new incidents at once; seconds until all their investigations are done."""
    started = time.monotonic()
    ids = []
    for n in range(count):
        reply = post_webhook(api, make_payload(f"{label}-{n}", alerts=[make_alert(f"fp-{label}-{n}")]))
        assert reply.status_code == 200 and reply.json()["enqueued"] is True, reply.text
        ids.append(reply.json()["investigation_id"])
    wait_for(lambda: statuses(db, ids) == ["done"] * count, 60, f"the {label} investigations", interval=0.05)
    return time.monotonic() - started


def test_a_hanging_slack_does_not_slow_investigations(
    pg_db: str, broker: str, slack: FakeSlack, stub_prometheus: StubPrometheus, tmp_path: Path
) -> None:
    """Slack deliveries have a Celery worker process of their own: with every Slack call hanging
    until its timeout, investigations take no longer than with a healthy Slack. Were deliveries to
    share the investigations' pool, each hanging one would hold a slot for the whole timeout: the
    batch would take about BATCH × timeout / concurrency (25 s) longer. The bound allows one timeout
    (5 s) over the slower healthy batch, for the machine's noise (seen: 5.4 to 8.8 s for one batch
    under a full CI run); it does not bound how much faster a batch may be."""
    env = worker_env(pg_db, broker, tmp_path, stub_prometheus, slack, slack_timeout_seconds=str(SLACK_TIMEOUT))
    app = create_celery_app(slack_settings(pg_db, tmp_path, slack, broker_url=broker))
    settings = slack_settings(pg_db, tmp_path, slack, broker_url=broker, prometheus_url=stub_prometheus.url)
    options = ("--no-beat", "--concurrency", "2", "--slack-concurrency", "1")
    with (
        running_worker(tmp_path, env, app, broker, "rca-iso", options) as worker,
        TestClient(create_app(settings)) as api,
    ):
        investigate_batch(api, pg_db, "warm-up", WARM_UP)  # the pools' first tasks import and connect
        # Investigations wait on Prometheus, as real ones do: the timings measure capacity more
        # than the CPU that the healthy Slack's deliveries take from this machine's two cores.
        stub_prometheus.delay = 0.1
        healthy = [investigate_batch(api, pg_db, "healthy", BATCH)]
        wait_for(lambda: len(slack.posts()) == WARM_UP + BATCH, 30, f"the healthy Slack posts\n{worker.output()}")
        slack.delay = 30.0  # Slack hangs: every call runs into the worker's timeout
        before = slack.arrived
        hanging = investigate_batch(api, pg_db, "hanging", BATCH)
        assert slack.arrived > before, "no Slack call was in flight while the investigations ran"
        assert len(slack.posts()) == WARM_UP + BATCH  # none of the hanging batch's notices got through
        slack.delay = 0.0  # healthy again: the notices owed are delivered while the next batch runs
        healthy.append(investigate_batch(api, pg_db, "healthy-again", BATCH))
    # Measured around the hanging batch, the healthy timings bracket the machine's noise.
    times = f"healthy Slack: {healthy[0]:.2f} s and {healthy[1]:.2f} s, hanging Slack: {hanging:.2f} s"
    assert hanging <= max(healthy) + SLACK_TIMEOUT, times


def test_one_scheduler_at_a_time_and_it_dies_with_its_worker(
    pg_db: str, broker: str, slack: FakeSlack, stub_prometheus: StubPrometheus, tmp_path: Path
) -> None:
    env = worker_env(pg_db, broker, tmp_path, stub_prometheus, slack, sweep_interval_seconds="0.5")
    app = create_celery_app(slack_settings(pg_db, tmp_path, slack, broker_url=broker))
    standby_log = tmp_path / "beat.log"
    with running_worker(tmp_path, env, app, broker, "rca-beat", ("--concurrency", "1")) as worker:
        wait_for(lambda: "scheduler: holding the lock" in worker.log.read_text(), 20, "the worker's scheduler")
        [scheduler] = [
            pid
            for pid in child_pids(worker.process.pid)
            if b"beat" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        ]
        with standby_log.open("wb") as sink:
            second = subprocess.Popen([str(VENV_BIN / "rca"), "beat"], env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: "standing by" in standby_log.read_text(), 20, "the second scheduler to stand by")
            time.sleep(2)  # four intervals: it sweeps none of them
            assert "holding the lock" not in standby_log.read_text() and second.poll() is None

            os.kill(worker.process.pid, signal.SIGKILL)
            wait_for(lambda: not alive(scheduler), 5, "the worker's scheduler to die with it")
            wait_for(lambda: "holding the lock" in standby_log.read_text(), 15, "the second scheduler to take over")
        finally:
            stop_process(second)
