"""The sweep re-queues what is lost, never a backlog (issue 35): investigations whose messages
wait in a real Redis behind no worker, however old, or sit with a consumer that has not acked them
yet, are left alone; the same investigations once their messages are gone are handed out again."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from rca.api.app import create_app
from rca.jobs.backlog import held_investigations
from rca.jobs.celery_app import INVESTIGATE, INVESTIGATIONS_QUEUE, run_sweep
from rca.jobs.celery_app import create_app as create_celery_app
from rca.jobs.dispatch import CeleryDispatcher
from rca.store.db import get_engine
from rca.store.models import InvestigationRow
from tests.helpers.brokers import own_redis_db
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import make_settings

BACKLOG = 5


@pytest.fixture
def own_broker() -> Iterator[str]:
    """A Redis database of this test's own: no worker of another test consumes it."""
    with own_redis_db() as url:
        yield url


def test_a_backlog_in_the_broker_is_late_not_lost_and_lost_messages_are_handed_out_again(
    pg_db: str, own_broker: str, tmp_path: Path
) -> None:
    settings = make_settings(pg_db, tmp_path, broker_url=own_broker, sweep_after_seconds=60)
    dispatcher = CeleryDispatcher(settings)
    try:
        with TestClient(create_app(settings, dispatcher=dispatcher)) as client:
            replies = [
                post_webhook(client, make_payload(f"g-{n}", alerts=[make_alert(f"fp-{n}")])) for n in range(BACKLOG)
            ]
    finally:
        dispatcher.close()
    ids = [reply.json()["investigation_id"] for reply in replies]
    assert all(reply.json()["enqueued"] for reply in replies)
    with get_engine(pg_db).begin() as conn:  # queued 5 minutes ago: past the sweep's 60 s
        conn.execute(update(InvestigationRow).values(queued_at=datetime.now(UTC) - timedelta(minutes=5)))
    app = create_celery_app(settings)

    assert held_investigations(app, INVESTIGATE, INVESTIGATIONS_QUEUE) == set(ids)
    assert run_sweep(app, settings) == 0  # waiting behind no worker: a backlog, not lost

    with app.connection_for_read() as connection:  # a consumer takes one and has not acked it yet
        taken = connection.SimpleQueue(INVESTIGATIONS_QUEUE).get(timeout=5)
        held = held_investigations(app, INVESTIGATE, INVESTIGATIONS_QUEUE)
        assert held == set(ids), "a message delivered and not acked is still held"
        assert run_sweep(app, settings) == 0
        taken.ack()

    with app.connection_for_write() as connection:  # the broker loses the rest (Redis restarted empty)
        connection.default_channel.client.flushdb()
    assert held_investigations(app, INVESTIGATE, INVESTIGATIONS_QUEUE) == set()
    assert run_sweep(app, settings) == BACKLOG
    assert held_investigations(app, INVESTIGATE, INVESTIGATIONS_QUEUE) == set(ids)  # handed out again


def test_a_broker_that_cannot_tell_leaves_the_sweep_to_judge_by_age(tmp_path: Path, pg_db: str) -> None:
    app = create_celery_app(make_settings(pg_db, tmp_path, broker_url="redis://127.0.0.1:1/0"))
    assert held_investigations(app, INVESTIGATE, INVESTIGATIONS_QUEUE) is None
