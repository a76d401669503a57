"""Slack through the real `rca worker` (Celery on Redis, PostgreSQL): the investigation task
queues the Slack task on its own queue after saving; a redelivered investigation, redelivered
Slack tasks and a repeated Alertmanager notification still give one message and at most one
update; the resolve notice becomes a thread reply. A notice whose enqueue was lost (broker down,
a worker dead between the commit and the enqueue) is posted once by the worker's sweep, also
when it races the notice's own task."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from rca.api.app import create_app
from rca.config import Settings
from rca.jobs.celery_app import create_app as create_celery_app
from rca.jobs.dispatch import CeleryDispatcher
from rca.jobs.runner import InvestigationRunner, run_investigation
from rca.notify.service import deliver
from rca.store.models import SlackAttemptRow, SlackDeliveryRow
from tests.fakes.prometheus import StubPrometheus
from tests.fakes.slack import TOKEN, Failure, FakeSlack
from tests.helpers.brokers import CLOSED_PORT_BROKER_URL, claim_redis_db
from tests.helpers.databases import rows
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.processes import Worker, running_worker, subprocess_env
from tests.helpers.service import API_AUTH, wait_for_investigation
from tests.helpers.slack import CHANNEL, backdate_owed, of_incident, slack_owed, slack_settings
from tests.helpers.waiting import wait_for


@pytest.fixture(scope="module")
def fake_slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


@pytest.fixture(scope="module")
def slack_worker(
    pg_url: str, prometheus: StubPrometheus, fake_slack: FakeSlack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Worker]:
    """`rca worker` with its default queues (investigations and slack), on a Redis db of its own."""
    broker, client = claim_redis_db(pinned_offset=2)
    home = tmp_path_factory.mktemp("slack-worker")
    env = subprocess_env(
        broker_url=broker,
        database_url=pg_url,
        prometheus_url=prometheus.url,
        data_dir=str(home / "rca-data"),
        log_level="DEBUG",
        slack_bot_token=TOKEN,
        slack_channel=CHANNEL,
        slack_api_url=fake_slack.api_url,
        slack_retry_backoff_seconds="0.2",
        public_url="https://rca.example",
    )
    app = create_celery_app(slack_settings(pg_url, home, fake_slack, broker_url=broker))
    try:
        with running_worker(home, env, app, broker, "rca-slack") as worker:
            yield worker
    finally:
        client.flushdb()
        client.close()


@pytest.fixture
def api(
    pg_db: str, prometheus: StubPrometheus, fake_slack: FakeSlack, tmp_path: Path, slack_worker: Worker
) -> Iterator[TestClient]:
    settings = slack_settings(
        pg_db, tmp_path, fake_slack, broker_url=slack_worker.broker, prometheus_url=prometheus.url
    )
    fake_slack.reset()  # incident ids restart with the emptied database
    with TestClient(create_app(settings)) as client:
        yield client


def drain(client: TestClient, fake: FakeSlack, label: str) -> None:
    """The worker runs one task at a time: once a later incident's Slack message is posted, every
    investigation and Slack task queued before it has run."""
    reply = post_webhook(client, make_payload(f"sentinel-{label}", alerts=[make_alert(f"fp-s-{label}")]))
    incident_id = reply.json()["incident_id"]
    wait_for(lambda: of_incident(fake.posts(), incident_id), 30, f"the sentinel message {label}")


def test_redelivered_tasks_and_repeated_notifications_give_one_message_and_at_most_one_update(
    api: TestClient, fake_slack: FakeSlack, slack_worker: Worker
) -> None:
    payload = make_payload("slack-once", alerts=[make_alert("fp-1", severity="critical")])
    first = post_webhook(api, payload).json()
    incident_id, investigation_id = first["incident_id"], first["investigation_id"]
    wait_for_investigation(api, incident_id)
    wait_for(lambda: of_incident(fake_slack.posts(), incident_id), 30, f"the Slack message\n{slack_worker.output()}")

    for _ in range(2):  # redelivered investigation (it re-queues the Slack task) and Slack tasks
        slack_worker.app.send_task("rca.investigate", args=[investigation_id])
        slack_worker.app.send_task("rca.slack_notify", args=[incident_id, "investigation"])
    assert post_webhook(api, payload).json()["investigation_id"] is None  # Alertmanager repeats itself
    second = make_payload(
        "slack-once", alerts=[make_alert("fp-1", severity="critical"), make_alert("fp-2", severity="critical")]
    )
    assert post_webhook(api, second).json()["investigation_id"] is not None  # a new alert: re-investigated
    drain(api, fake_slack, "once")

    assert len(of_incident(fake_slack.posts(), incident_id)) == 1
    assert len(of_incident(fake_slack.updates(), incident_id)) <= 1
    assert fake_slack.problems == []
    body = api.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH).json()
    assert body["slack"]["status"] == "delivered" and body["slack"]["messages"] == 1
    assert TOKEN not in slack_worker.log.read_text(errors="replace")


def test_resolve_notice_becomes_a_thread_reply_via_the_slack_queue(
    api: TestClient, fake_slack: FakeSlack, slack_worker: Worker
) -> None:
    reply = post_webhook(api, make_payload("slack-resolve", alerts=[make_alert("fp-r")]))
    incident_id = reply.json()["incident_id"]
    wait_for(lambda: of_incident(fake_slack.posts(), incident_id), 30, f"the Slack message\n{slack_worker.output()}")
    [post] = of_incident(fake_slack.posts(), incident_id)

    post_webhook(api, make_payload("slack-resolve", alerts=[make_alert("fp-r", status="resolved")]))

    thread = json.loads(post.answer)["ts"]
    replies = wait_for(
        lambda: [r for r in fake_slack.replies() if r.payload["thread_ts"] == thread],
        30,
        f"the resolved reply\n{slack_worker.output()}",
    )
    assert "Resolved" in replies[0].payload["text"]
    body = wait_for(
        lambda: (
            (b := api.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH).json())["slack"]["resolved_notified_at"]
            and b
        ),
        10,
        "the resolved notice to be recorded",
    )
    assert [a["action"] for a in body["slack"]["attempts"]] == ["post", "update", "reply"]


def test_celery_retries_honour_retry_after_then_back_off_on_server_errors(
    api: TestClient, fake_slack: FakeSlack, slack_worker: Worker
) -> None:
    fake_slack.fail_next(Failure(429, retry_after=2), Failure(503))
    reply = post_webhook(api, make_payload("slack-retry", alerts=[make_alert("fp-retry")]))
    incident_id = reply.json()["incident_id"]
    [accepted] = wait_for(
        lambda: of_incident(fake_slack.posts(), incident_id),
        30,
        f"the Slack message after retries\n{slack_worker.output()}",
    )

    limited, unavailable = fake_slack.received[0], fake_slack.received[1]
    assert (limited.status, unavailable.status) == (429, 503)
    assert unavailable.at - limited.at >= 2.0, "the Celery retry came before Retry-After"
    assert accepted.at - unavailable.at >= 0.2  # backoff: half to all of 0.2 s * 2 ** (attempt 2 - 1)
    body = api.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH).json()
    assert [(a["outcome"], a["http_status"], a["retry_after"]) for a in body["slack"]["attempts"]] == [
        ("rate_limited", 429, 2.0),
        ("retry", 503, None),
        ("ok", 200, None),
    ]
    assert body["investigation"]["status"] == "done"


# ------------------------------------------------------------------ notices owed, delivered by the sweep


def attempt_events(url: str, incident_id: int) -> list[tuple[str, str]]:
    query = (
        select(SlackAttemptRow.action, SlackAttemptRow.event)
        .join(SlackDeliveryRow)
        .where(SlackDeliveryRow.incident_id == incident_id)
        .order_by(SlackAttemptRow.id)
    )
    return [tuple(row) for row in rows(url, query)]


def broker_down(url: str, tmp_path: Path, fake: FakeSlack, prometheus: StubPrometheus) -> Settings:
    """This service's settings with the broker unreachable: every enqueue fails at once."""
    return slack_settings(url, tmp_path, fake, broker_url=CLOSED_PORT_BROKER_URL, prometheus_url=prometheus.url)


def investigated_but_never_queued(settings: Settings, lost: str) -> tuple[int, int]:
    """An alert stored and investigated to `done` while its Slack notice never reached the queue:
    the broker was down for the enqueue, or the worker died between the commit and the enqueue."""
    with TestClient(create_app(settings)) as client:
        reply = post_webhook(client, make_payload(f"owed-{lost}", alerts=[make_alert(f"fp-{lost}")])).json()
    assert reply["enqueued"] is False
    incident_id, investigation_id = reply["incident_id"], reply["investigation_id"]
    if lost == "broker-down":
        dispatcher = CeleryDispatcher(settings)
        try:  # the job body as the worker runs it; its Slack enqueue fails and is only logged
            assert InvestigationRunner(settings, dispatcher.notify).attempt(investigation_id) == "done"
        finally:
            dispatcher.close()
    else:
        assert run_investigation(settings, investigation_id) == "done"  # committed; nothing queued after
    return incident_id, investigation_id


def sweep_on_the_worker(worker: Worker, url: str, incident_id: int) -> None:
    """The worker's sweep grants the enqueue RCA_SWEEP_AFTER_SECONDS (60 s): backdate, then sweep."""
    backdate_owed(url, incident_id, timedelta(minutes=2))
    worker.app.send_task("rca.sweep")


@pytest.mark.parametrize("lost", ["broker-down", "worker-died"])
def test_a_notice_whose_enqueue_was_lost_is_posted_once_by_the_sweep(
    api: TestClient,
    pg_db: str,
    prometheus: StubPrometheus,
    fake_slack: FakeSlack,
    slack_worker: Worker,
    tmp_path: Path,
    lost: str,
) -> None:
    incident_id, _ = investigated_but_never_queued(broker_down(pg_db, tmp_path, fake_slack, prometheus), lost)
    assert slack_owed(pg_db, incident_id)[1] is not None  # owed in the transaction that finished it
    assert of_incident(fake_slack.received, incident_id) == []

    sweep_on_the_worker(slack_worker, pg_db, incident_id)
    wait_for(lambda: of_incident(fake_slack.posts(), incident_id), 30, f"the swept notice\n{slack_worker.output()}")
    wait_for(lambda: slack_owed(pg_db, incident_id)[1] is None, 10, "the notice to be settled")
    slack_worker.app.send_task("rca.sweep")  # nothing is owed now: nothing more is queued
    drain(api, fake_slack, f"swept-{lost}")

    assert len(of_incident(fake_slack.posts(), incident_id)) == 1
    assert attempt_events(pg_db, incident_id) == [("post", "sweep")]
    assert fake_slack.problems == []


def test_the_queued_notice_and_the_sweep_racing_post_once(
    api: TestClient,
    pg_db: str,
    prometheus: StubPrometheus,
    fake_slack: FakeSlack,
    slack_worker: Worker,
    tmp_path: Path,
) -> None:
    """The notice's own task (another worker process: this test's thread) is mid-call to Slack,
    holding the delivery row, when the worker's sweep claims the same notice and delivers it: the
    swept delivery waits on the row, then finds Slack up to date."""
    settings = broker_down(pg_db, tmp_path, fake_slack, prometheus)
    incident_id, _ = investigated_but_never_queued(settings, "race")
    backdate_owed(pg_db, incident_id, timedelta(minutes=2))
    fake_slack.delay = 3.0
    outcome: list[str] = []
    task = threading.Thread(target=lambda: outcome.append(deliver(settings, incident_id, "investigation").status))
    task.start()
    wait_for(lambda: fake_slack.arrived == 1, 10, "the queued task's call to Slack")

    unchanged = slack_worker.log.read_text(errors="replace").count("'unchanged'")  # earlier tests' too
    slack_worker.app.send_task("rca.sweep")
    wait_for(
        lambda: slack_worker.log.read_text(errors="replace").count("'unchanged'") > unchanged,
        30,
        f"the swept delivery to find Slack up to date\n{slack_worker.output()}",
    )
    task.join(30)
    fake_slack.delay = 0.0

    assert outcome == ["delivered"]
    assert fake_slack.arrived == 1, "the swept delivery called Slack while the queued task held the row"
    assert len(of_incident(fake_slack.posts(), incident_id)) == 1
    assert attempt_events(pg_db, incident_id) == [("post", "investigation")]
    assert slack_owed(pg_db, incident_id)[1] is None


def test_a_resolve_notice_whose_enqueue_failed_is_posted_by_the_sweep(
    api: TestClient,
    pg_db: str,
    prometheus: StubPrometheus,
    fake_slack: FakeSlack,
    slack_worker: Worker,
    tmp_path: Path,
) -> None:
    reply = post_webhook(api, make_payload("owed-resolve", alerts=[make_alert("fp-or")]))
    incident_id = reply.json()["incident_id"]
    wait_for(lambda: of_incident(fake_slack.posts(), incident_id), 30, f"the Slack message\n{slack_worker.output()}")
    wait_for(lambda: slack_owed(pg_db, incident_id)[1] is None, 10, "the first notice to be settled")
    [post] = of_incident(fake_slack.posts(), incident_id)

    with TestClient(create_app(broker_down(pg_db, tmp_path, fake_slack, prometheus))) as down:
        resolved = make_payload("owed-resolve", alerts=[make_alert("fp-or", status="resolved")])
        assert post_webhook(down, resolved).status_code == 200  # stored; its Slack enqueue failed
    assert slack_owed(pg_db, incident_id)[1] is not None  # owed in the intake transaction

    sweep_on_the_worker(slack_worker, pg_db, incident_id)
    thread = json.loads(post.answer)["ts"]
    wait_for(
        lambda: [r for r in fake_slack.replies() if r.payload["thread_ts"] == thread],
        30,
        f"the swept resolve notice\n{slack_worker.output()}",
    )
    wait_for(lambda: slack_owed(pg_db, incident_id)[1] is None, 10, "the resolve notice to be settled")
    slack_worker.app.send_task("rca.sweep")
    drain(api, fake_slack, "swept-resolve")

    assert len([r for r in fake_slack.replies() if r.payload["thread_ts"] == thread]) == 1
    assert "Resolved" in fake_slack.replies()[0].payload["text"]
    assert attempt_events(pg_db, incident_id) == [("post", "investigation"), ("update", "sweep"), ("reply", "sweep")]
