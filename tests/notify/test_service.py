"""Slack delivery against a local server speaking Slack's Web API and webhook protocols
(`tests/fakes/slack.py`): one message per incident, updates only on material change, Retry-After
honoured, 5xx retried with backoff, client errors final, a Slack outage invisible to
investigations, and no secret in logs or API answers."""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from rca.api.app import create_app
from rca.domain.status import SlackEvent
from rca.incidents import feedback as incident_feedback
from rca.jobs.sweep import owed_notices
from rca.notify import service
from rca.notify.service import deliver
from rca.store import notices
from rca.store.db import session_scope
from rca.store.models import InvestigationRow, SlackAttemptRow, SlackDeliveryRow
from tests.e2e.promstack import free_port
from tests.fakes.llm import FakeLLM, error
from tests.fakes.prometheus import StubPrometheus
from tests.fakes.slack import TOKEN, WEBHOOK_PATH, Failure, FakeSlack
from tests.helpers.databases import CLOSED_PORT_DATABASE_URL, rows, truncate
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import API_AUTH, RecordingDispatcher, make_settings, wait_for_investigation
from tests.helpers.slack import (
    backdate_owed,
    in_round,
    owe_slack,
    resolve,
    slack_owed,
    slack_settings,
    store_incident,
    store_investigation,
)
from tests.helpers.waiting import wait_for


def attempts(url: str, incident_id: int) -> list[tuple[str, str, int | None, float | None]]:
    query = (
        select(
            SlackAttemptRow.action, SlackAttemptRow.outcome, SlackAttemptRow.http_status, SlackAttemptRow.retry_after
        )
        .join(SlackDeliveryRow)
        .where(SlackDeliveryRow.incident_id == incident_id)
        .order_by(SlackAttemptRow.id)
    )
    return [tuple(row) for row in rows(url, query)]


def delivery(url: str, incident_id: int) -> object:
    [row] = rows(url, select(SlackDeliveryRow.__table__).where(SlackDeliveryRow.incident_id == incident_id))
    return row


def test_bot_posts_once_and_updates_only_on_material_change(db_url: str, tmp_path: Path, slack: FakeSlack) -> None:
    settings = slack_settings(db_url, tmp_path, slack)
    incident_id = store_incident(db_url)
    store_investigation(db_url, incident_id, ["queue_median"], ["arrival_surge", "batching_misconfig"])

    assert deliver(settings, incident_id, "investigation").status == "delivered"
    assert deliver(settings, incident_id, "investigation").status == "unchanged"  # a redelivered task
    store_investigation(
        db_url,
        incident_id,
        ["queue_median"],
        ["arrival_surge", "batching_misconfig"],
        wording="an LLM put it differently",
    )
    assert deliver(settings, incident_id, "investigation").status == "unchanged"  # same evidence, new words
    assert (len(slack.posts()), len(slack.updates()), len(slack.replies())) == (1, 0, 0)

    changed = store_investigation(
        db_url, incident_id, ["queue_median", "cpu_bound_ratio"], ["cpu_launch_overhead", "arrival_surge"]
    )
    assert deliver(settings, incident_id, "investigation").status == "delivered"
    assert deliver(settings, incident_id, "investigation").status == "unchanged"

    [post], [update], [reply] = slack.posts(), slack.updates(), slack.replies()
    posted = json.loads(post.answer)
    assert post.payload["channel"] == "#llm-alerts"
    assert (update.payload["channel"], update.payload["ts"]) == (posted["channel"], posted["ts"])
    assert reply.payload["thread_ts"] == posted["ts"] and f"Re-investigation #{changed}" in reply.payload["text"]
    assert "cpu_launch_overhead" in json.dumps(update.payload["blocks"])
    row = delivery(db_url, incident_id)
    assert (row.status, row.channel, row.ts, row.messages, row.updates) == (
        "delivered",
        posted["channel"],
        posted["ts"],
        2,
        1,
    )


def test_a_fleet_incident_gets_one_message_once_every_host_answered_its_hosts_grouped_by_cause(
    db_url: str, tmp_path: Path, slack: FakeSlack
) -> None:
    settings = slack_settings(db_url, tmp_path, slack)
    incident_id = store_incident(db_url)
    causes = {"gpu-node-1": "arrival_surge", "gpu-node-2": "arrival_surge", "gpu-node-3": "kv_memory_pressure"}
    ids = [store_investigation(db_url, incident_id, ["queue_median"], [c], host=h) for h, c in causes.items()]
    with session_scope(db_url) as session:
        session.add(
            InvestigationRow(
                incident_id=incident_id, status="running", reason="new_incident", attempts=1, host="gpu-node-4"
            )
        )
        session.flush()
        waiting = session.scalars(select(InvestigationRow.id).where(InvestigationRow.host == "gpu-node-4")).one()
    in_round(db_url, [*ids, waiting])

    assert deliver(settings, incident_id, "investigation").status == "skipped"  # gpu-node-4 still runs
    assert slack.posts() == []
    with session_scope(db_url) as session:  # gpu-node-4's run ends
        session.get_one(InvestigationRow, waiting).status = "failed"

    assert deliver(settings, incident_id, "investigation").status == "delivered"
    [post] = slack.posts()
    text = json.dumps(post.payload["blocks"])
    assert "arrival_surge on 2 hosts (gpu-node-1, gpu-node-2)" in text
    assert "kv_memory_pressure on 1 host (gpu-node-3)" in text
    assert "investigation failed: 1 host (gpu-node-4)" in text
    assert "fleet-wide" not in text and "Most likely causes" not in text
    assert post.payload["text"].endswith(
        "on 4 hosts (gpu-node-1..4): arrival_surge on 2 hosts (gpu-node-1, gpu-node-2), confidence 0.70"
    )
    assert deliver(settings, incident_id, "investigation").status == "unchanged"


def test_resolved_incident_gets_one_thread_reply_and_the_message_says_resolved(
    db_url: str, tmp_path: Path, slack: FakeSlack
) -> None:
    settings = slack_settings(db_url, tmp_path, slack)
    incident_id = store_incident(db_url)
    store_investigation(db_url, incident_id, ["queue_median"], ["arrival_surge"])
    deliver(settings, incident_id, "investigation")
    resolve(db_url, incident_id)

    assert deliver(settings, incident_id, "resolved").status == "delivered"
    assert deliver(settings, incident_id, "resolved").status == "unchanged"

    [post], [update], [reply] = slack.posts(), slack.updates(), slack.replies()
    assert ":white_check_mark:" in update.payload["blocks"][0]["text"]["text"]
    assert reply.payload["thread_ts"] == json.loads(post.answer)["ts"] and "Resolved" in reply.payload["text"]


def test_resolve_before_the_first_post_waits_for_it(pg_db: str, tmp_path: Path, slack: FakeSlack) -> None:
    settings = slack_settings(pg_db, tmp_path, slack)
    incident_id = store_incident(pg_db)
    resolve(pg_db, incident_id)
    assert deliver(settings, incident_id, "resolved").status == "skipped"  # nothing to reply to yet
    store_investigation(pg_db, incident_id, ["queue_median"], ["arrival_surge"])
    assert deliver(settings, incident_id, "investigation").status == "delivered"
    [post] = slack.posts()
    assert ":white_check_mark:" in post.payload["blocks"][0]["text"]["text"]
    assert deliver(settings, incident_id, "resolved").status == "unchanged"  # the message already says so
    assert slack.replies() == []


def test_rate_limit_honours_retry_after(pg_db: str, tmp_path: Path, slack: FakeSlack) -> None:
    settings = slack_settings(pg_db, tmp_path, slack)
    incident_id = store_incident(pg_db)
    store_investigation(pg_db, incident_id, ["queue_median"], ["arrival_surge"])
    slack.fail_next(Failure(429, retry_after=7))

    outcome = deliver(settings, incident_id, "investigation", attempt=1)
    assert (outcome.status, outcome.retry_in) == ("retrying", 7.0)
    assert delivery(pg_db, incident_id).status == "retrying"
    assert deliver(settings, incident_id, "investigation", attempt=2).status == "delivered"
    assert attempts(pg_db, incident_id) == [("post", "rate_limited", 429, 7.0), ("post", "ok", 200, None)]
    assert len(slack.posts()) == 1


def test_server_errors_and_network_errors_retry_with_backoff_then_give_up(
    pg_db: str, tmp_path: Path, slack: FakeSlack
) -> None:
    settings = slack_settings(pg_db, tmp_path, slack, slack_max_attempts=3, slack_retry_backoff_seconds=2)
    incident_id = store_incident(pg_db)
    store_investigation(pg_db, incident_id, ["queue_median"], ["arrival_surge"])
    slack.fail_next(Failure(503), Failure(500, error="rollup_error"))

    first = deliver(settings, incident_id, "investigation", attempt=1).retry_in
    second = deliver(settings, incident_id, "investigation", attempt=2).retry_in
    # the service's backoff (rca.domain.retry): between half and all of 2 s, then of 4 s
    assert first is not None and 1 <= first <= 2, first
    assert second is not None and 2 <= second <= 4, second
    assert deliver(settings, incident_id, "investigation", attempt=3).status == "delivered"

    unreachable = slack_settings(pg_db, tmp_path, slack, slack_api_url="http://127.0.0.1:1/api/", slack_max_attempts=2)
    other = store_incident(pg_db)
    store_investigation(pg_db, other, ["queue_median"], ["arrival_surge"])
    assert deliver(unreachable, other, "investigation", attempt=1).status == "retrying"
    final = deliver(unreachable, other, "investigation", attempt=2)
    assert final.status == "failed" and final.retry_in is None
    assert attempts(pg_db, other) == [("post", "retry", None, None)] * 2
    assert delivery(pg_db, other).last_error.startswith("network error")
    assert attempts(pg_db, incident_id) == [
        ("post", "retry", 503, None),
        ("post", "retry", 500, None),
        ("post", "ok", 200, None),
    ]


def test_client_errors_are_final_at_once(pg_db: str, tmp_path: Path, slack: FakeSlack) -> None:
    incident_id = store_incident(pg_db)
    store_investigation(pg_db, incident_id, ["queue_median"], ["arrival_surge"])
    bad_token = slack_settings(pg_db, tmp_path, slack, slack_bot_token="xoxb-wrong")
    outcome = deliver(bad_token, incident_id, "investigation", attempt=1)
    assert (outcome.status, outcome.detail) == ("failed", "invalid_auth")

    hook = slack_settings(
        pg_db,
        tmp_path,
        slack,
        mode="webhook",
        slack_webhook_url=slack.webhook_url.replace(WEBHOOK_PATH, "/services/T/B/revoked"),
    )
    other = store_incident(pg_db)
    store_investigation(pg_db, other, ["queue_median"], ["arrival_surge"])
    assert deliver(hook, other, "investigation", attempt=1).status == "failed"
    assert attempts(pg_db, other) == [("post", "failed", 404, None)]
    assert delivery(pg_db, other).last_error == "no_service"


def test_webhook_mode_posts_once_then_a_new_message_only_on_change(
    db_url: str, tmp_path: Path, slack: FakeSlack
) -> None:
    settings = slack_settings(db_url, tmp_path, slack, mode="webhook")
    incident_id = store_incident(db_url)
    store_investigation(db_url, incident_id, ["queue_median"], ["arrival_surge"])
    deliver(settings, incident_id, "investigation")
    deliver(settings, incident_id, "investigation")
    assert [r.answer for r in slack.webhook_posts()] == ["ok"]

    store_investigation(db_url, incident_id, ["queue_median", "cpu_bound_ratio"], ["cpu_launch_overhead"])
    deliver(settings, incident_id, "investigation")
    resolve(db_url, incident_id)
    deliver(settings, incident_id, "resolved")
    deliver(settings, incident_id, "resolved")
    first, updated, resolved = slack.webhook_posts()
    assert "Update: re-investigation" in json.dumps(updated.payload)
    assert "Resolved" in resolved.payload["text"]


def test_concurrent_deliveries_of_one_incident_post_once(pg_db: str, tmp_path: Path, slack: FakeSlack) -> None:
    """Three tasks at once (e.g. Redis redelivering a slow task): the row lock makes them wait."""
    settings = slack_settings(pg_db, tmp_path, slack)
    incident_id = store_incident(pg_db)
    assert deliver(settings, incident_id, "investigation").status == "skipped"  # the row exists, unposted
    store_investigation(pg_db, incident_id, ["queue_median"], ["arrival_surge"])
    slack.delay = 0.5
    outcomes: list[str] = []
    threads = [
        threading.Thread(target=lambda: outcomes.append(deliver(settings, incident_id, "investigation").status))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["delivered", "unchanged", "unchanged"]
    assert len(slack.posts()) == 1


def embedded_client(settings: object) -> TestClient:
    return TestClient(create_app(settings))  # type: ignore[arg-type]


def test_embedded_mode_posts_after_the_investigation_and_shows_every_attempt(
    db_url: str, tmp_path: Path, slack: FakeSlack
) -> None:
    settings = slack_settings(db_url, tmp_path, slack)
    slack.fail_next(Failure(429, retry_after=1))
    with embedded_client(settings) as client:
        reply = post_webhook(client, make_payload("embedded", alerts=[make_alert("fp-e", severity="critical")]))
        incident_id = reply.json()["incident_id"]
        wait_for_investigation(client, incident_id)
        wait_for(lambda: slack.posts(), 15, "the Slack post")
        post_webhook(client, make_payload("embedded", alerts=[make_alert("fp-e", status="resolved")]))
        wait_for(lambda: slack.replies(), 15, "the resolved reply in the thread")
        body = client.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH).json()

    limited, accepted = slack.received[0], slack.posts()[0]
    assert limited.status == 429 and accepted.at - limited.at >= 1.0, "Retry-After: 1 was not honoured"
    outcomes = [(a["action"], a["outcome"], a["http_status"], a["retry_after"]) for a in body["slack"]["attempts"]]
    assert outcomes == [
        ("post", "rate_limited", 429, 1.0),
        ("post", "ok", 200, None),
        ("update", "ok", 200, None),
        ("reply", "ok", 200, None),
    ]
    assert body["slack"]["status"] == "delivered" and body["slack"]["ts"] == json.loads(accepted.answer)["ts"]
    assert f"https://rca.example/incidents/{incident_id}" in json.dumps(accepted.payload)


def test_slack_outage_never_affects_the_investigation(
    db_url: str, tmp_path: Path, slack: FakeSlack, prometheus: StubPrometheus
) -> None:
    settings = slack_settings(
        db_url, tmp_path, slack, slack_max_attempts=2, slack_retry_backoff_seconds=0.1, prometheus_url=prometheus.url
    )
    slack.down = True
    with embedded_client(settings) as client:
        reply = post_webhook(client, make_payload("outage", alerts=[make_alert("fp-o")]))
        incident = wait_for_investigation(client, reply.json()["incident_id"])

        def failed() -> dict | None:
            body = client.get(f"/api/v1/incidents/{reply.json()['incident_id']}", headers=API_AUTH).json()
            return body if body["slack"] and body["slack"]["status"] == "failed" else None

        body = wait_for(failed, 15, "the Slack delivery to give up")
    assert incident["investigation"]["status"] == "done" and incident["investigation"]["error"] is None
    assert body["investigation"] == incident["investigation"]  # Slack changed nothing about it
    assert incident["investigation"]["findings"] and incident["investigation"]["hypotheses"]
    assert [(a["outcome"], a["http_status"], a["error"]) for a in body["slack"]["attempts"]] == [
        ("retry", 503, "HTTP 503")
    ] * 2


def test_secrets_never_reach_logs_or_the_api(
    pg_db: str, tmp_path: Path, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret_part = WEBHOOK_PATH.rsplit("/", 1)[1]
    for mode in ("bot", "webhook"):
        settings = slack_settings(pg_db, tmp_path, slack, mode=mode)
        incident_id = store_incident(pg_db)
        store_investigation(pg_db, incident_id, ["queue_median"], ["arrival_surge"])
        slack.fail_next(Failure(500))
        deliver(settings, incident_id, "investigation", attempt=1)
        deliver(settings, incident_id, "investigation", attempt=2)
        with TestClient(create_app(settings, dispatcher=_NoDispatch())) as client:
            api = client.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH).text
        assert TOKEN not in api and secret_part not in api
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "slack" in logged.lower()  # the deliveries did log
    assert TOKEN not in logged and secret_part not in logged


class _NoDispatch:
    def enqueue(self, investigation_id: int) -> bool:
        return False

    def notify(self, incident_id: int, event: str) -> bool:
        return False

    def close(self) -> None:
        pass


def test_database_down_for_slack_does_not_raise_into_the_investigation_path(tmp_path: Path, slack: FakeSlack) -> None:
    from rca.jobs.slack import queue_notice_of

    settings = slack_settings(CLOSED_PORT_DATABASE_URL, tmp_path, slack)
    started = time.monotonic()
    queue_notice_of(settings, 1, lambda incident_id, event: True)  # logs and returns
    assert time.monotonic() - started < 30


def test_resolve_notice_queues_a_slack_notice_only_when_slack_is_on(
    db_url: str, tmp_path: Path, slack: FakeSlack
) -> None:
    for settings, expected in (
        (slack_settings(db_url, tmp_path, slack), "resolved"),
        (make_settings(db_url, tmp_path), None),
    ):
        truncate(db_url)
        recorder = RecordingDispatcher()
        with TestClient(create_app(settings, dispatcher=recorder)) as client:
            firing = post_webhook(client, make_payload("resolve-hook", alerts=[make_alert("fp-h")])).json()
            post_webhook(client, make_payload("resolve-hook", alerts=[make_alert("fp-h")]))  # repeated: nothing
            post_webhook(client, make_payload("resolve-hook", alerts=[make_alert("fp-h", status="resolved")]))
            post_webhook(client, make_payload("resolve-hook", alerts=[make_alert("fp-h", status="resolved")]))
        assert recorder.notified == ([(firing["incident_id"], expected)] if expected else [])


def test_the_message_cites_the_last_incident_with_the_same_evidence_and_its_confirmed_cause(
    db_url: str, tmp_path: Path, slack: FakeSlack
) -> None:
    settings = slack_settings(db_url, tmp_path, slack)
    past = store_incident(db_url)
    store_investigation(db_url, past, ["queue_median", "cpu_bound_ratio"], ["cpu_launch_overhead", "arrival_surge"])
    unrelated = store_incident(db_url)
    store_investigation(db_url, unrelated, ["prefix_cache_hit_rate"], ["prefix_cache_miss"])
    with session_scope(db_url) as session:
        incident_feedback.record(
            session,
            past,
            category="cpu_quota_throttling",
            note="cgroup quota",
            verdicts=[],
            author="oncall",
            categories=["cpu_quota_throttling"],
        )
    now = store_incident(db_url)
    store_investigation(db_url, now, ["queue_median", "cpu_bound_ratio"], ["cpu_launch_overhead", "arrival_surge"])

    assert deliver(settings, now, "investigation").status == "delivered"
    assert deliver(settings, unrelated, "investigation").status == "delivered"
    cited, alone = (json.dumps(post.payload["blocks"]) for post in slack.posts())
    assert f"*Last time* (<https://rca.example/incidents/{past}|#{past}>" in cited
    assert "`cpu_quota_throttling`, confirmed by an engineer" in cited  # the engineer's cause, not the ranking's
    assert "Last time" not in alone  # nothing before it looks alike


def test_a_blind_investigation_is_posted_as_could_not_investigate_with_no_cause_and_no_author(
    pg_db: str, tmp_path: Path, slack: FakeSlack
) -> None:
    """Issues 16.8 and 32.1, end to end: Prometheus down and the LLM failing. The post must not read as a
    healthy verdict, nor as a cause written by anyone: it says it could not investigate, and why."""
    prometheus_url = f"http://127.0.0.1:{free_port()}"
    overloaded = error(503, "The engine is currently overloaded, please try again later", "server_error")
    with FakeLLM(lambda request: overloaded) as llm:
        settings = slack_settings(
            pg_db,
            tmp_path,
            slack,
            prometheus_url=prometheus_url,
            llm_base_url=llm.base_url,
            llm_model="fake-model",
            llm_max_retries=0,
        )
        with embedded_client(settings) as client:
            reply = post_webhook(client, make_payload("degraded", alerts=[make_alert("fp-d")]))
            inv = wait_for_investigation(client, reply.json()["incident_id"])["investigation"]
            wait_for(lambda: slack.posts(), 15, "the Slack post")
    assert (inv["status"], inv["inconclusive_reason"]) == ("inconclusive", "prometheus_unreachable")
    assert inv["analyst"] is None and inv["hypotheses"] == [] and llm.requests == []  # nothing to explain
    payload = slack.posts()[0].payload
    posted = json.dumps(payload, ensure_ascii=False)
    assert (
        f"Could not investigate: Prometheus unreachable, so no metrics were read (Prometheus at {prometheus_url} "
        "is unavailable"
    ) in posted
    assert payload["text"].endswith(": could not investigate: Prometheus unreachable")
    assert "this is not a healthy verdict" in posted and "No signal breached its threshold" not in posted
    assert "Most likely causes" not in posted and "Breached signals" not in posted and "Written by" not in posted


def test_a_delivery_settles_the_notices_owed_whatever_it_had_to_send(
    db_url: str, tmp_path: Path, slack: FakeSlack
) -> None:
    settings = slack_settings(db_url, tmp_path, slack)
    incident_id = store_incident(db_url)
    owe_slack(db_url, incident_id)  # e.g. a resolve before the first investigation finished
    assert deliver(settings, incident_id, "resolved").status == "skipped"
    assert slack_owed(db_url, incident_id) == (1, None)  # its completion will owe (and post) again

    store_investigation(db_url, incident_id, ["queue_median"], ["arrival_surge"])
    owe_slack(db_url, incident_id)
    assert deliver(settings, incident_id, "investigation").status == "delivered"
    assert slack_owed(db_url, incident_id) == (2, None)
    owe_slack(db_url, incident_id)  # a redelivered investigation owes again: nothing new to say
    assert deliver(settings, incident_id, "sweep").status == "unchanged"
    assert slack_owed(db_url, incident_id) == (3, None)
    assert len(slack.posts()) == 1


def test_a_retry_defers_the_sweep_and_a_final_failure_stays_owed(pg_db: str, tmp_path: Path, slack: FakeSlack) -> None:
    """A failure for good is not dropped: the notice stays owed, tried again by the sweep only
    after RCA_SLACK_FAILED_RETRY_SECONDS, and posts once Slack takes it."""
    settings = slack_settings(pg_db, tmp_path, slack, slack_max_attempts=2, slack_failed_retry_seconds=600)
    incident_id = store_incident(pg_db)
    store_investigation(pg_db, incident_id, ["queue_median"], ["arrival_surge"])
    owe_slack(pg_db, incident_id)
    slack.fail_next(Failure(429, retry_after=30), Failure(503))
    outcome = deliver(settings, incident_id, "investigation", attempt=1)
    assert outcome.status == "retrying"
    _, since = slack_owed(pg_db, incident_id)
    assert since is not None and since > datetime.now(UTC) + timedelta(seconds=25)  # not before its own retry
    assert deliver(settings, incident_id, "investigation", attempt=2).status == "failed"
    count, since = slack_owed(pg_db, incident_id)
    assert count == 1 and since is not None and since > datetime.now(UTC) + timedelta(seconds=590)
    backdate_owed(pg_db, incident_id, timedelta(minutes=2))  # the long wait is over
    with session_scope(pg_db) as session:
        assert notices.claim_owed(session, timedelta(minutes=1)) == [incident_id]
    assert deliver(settings, incident_id, "sweep").status == "delivered"
    assert slack_owed(pg_db, incident_id) == (1, None) and len(slack.posts()) == 1


def test_a_database_error_during_delivery_leaves_the_notice_owed(pg_db: str, tmp_path: Path, slack: FakeSlack) -> None:
    """The database blinks while the delivery reads (before any Slack call): the task's retries may
    run out, the notice stays owed for the sweep."""
    settings = slack_settings(pg_db, tmp_path, slack)
    incident_id = store_incident(pg_db)
    store_investigation(pg_db, incident_id, ["queue_median"], ["arrival_surge"])
    owe_slack(pg_db, incident_id)
    with pytest.MonkeyPatch.context() as mp:

        def blink(*_args: object, **_kwargs: object) -> None:
            raise OperationalError("SELECT", {}, Exception("server closed the connection unexpectedly"))

        mp.setattr(service, "_latest_finished", blink)
        with pytest.raises(OperationalError):
            deliver(settings, incident_id, "investigation")
    assert slack_owed(pg_db, incident_id)[1] is not None and slack.posts() == []
    assert deliver(settings, incident_id, SlackEvent.SWEEP).status == "delivered"
    assert slack_owed(pg_db, incident_id) == (1, None) and len(slack.posts()) == 1


@pytest.mark.parametrize("row_exists", [True, False], ids=["delivery-row-exists", "first-delivery"])
def test_the_sweep_and_a_queued_notice_racing_post_once(
    pg_db: str, tmp_path: Path, slack: FakeSlack, row_exists: bool
) -> None:
    """The queued task is talking to Slack when the sweep claims the same notice: the sweep's
    delivery waits on the row lock, then finds Slack up to date."""
    settings = slack_settings(pg_db, tmp_path, slack)
    incident_id = store_incident(pg_db)
    if row_exists:
        assert deliver(settings, incident_id, "resolved").status == "skipped"  # the row exists, unposted
    store_investigation(pg_db, incident_id, ["queue_median"], ["arrival_surge"])
    owe_slack(pg_db, incident_id, ago=timedelta(minutes=5))
    slack.delay = 1.5
    outcomes: dict[str, str] = {}
    queued = threading.Thread(
        target=lambda: outcomes.update(task=deliver(settings, incident_id, "investigation").status)
    )
    queued.start()
    wait_for(lambda: slack.arrived == 1, 5, "the queued task's call to Slack")  # it holds the row now
    claimed = owed_notices(settings, timedelta(seconds=60))
    assert claimed == [incident_id]  # the incident's own row is free: only the delivery row is held
    assert not slack.received, "the queued task finished before the sweep delivered: no race"
    for swept in claimed:
        outcomes["sweep"] = deliver(settings, swept, SlackEvent.SWEEP).status
    queued.join(30)
    assert outcomes == {"task": "delivered", "sweep": "unchanged"}
    assert len(slack.posts()) == 1
    assert slack_owed(pg_db, incident_id) == (1, None)


def test_embedded_sweeper_delivers_a_notice_owed_by_a_previous_process(
    db_url: str, tmp_path: Path, slack: FakeSlack
) -> None:
    """The process that finished the investigation stopped before its Slack thread ran: the next
    one's first sweep delivers the notice, once."""
    settings = slack_settings(db_url, tmp_path, slack)
    incident_id = store_incident(db_url)
    store_investigation(db_url, incident_id, ["queue_median"], ["arrival_surge"])
    owe_slack(db_url, incident_id)
    with embedded_client(settings):
        wait_for(lambda: slack.posts(), 15, "the swept notice")
        wait_for(lambda: slack_owed(db_url, incident_id)[1] is None, 5, "the notice to be settled")
    assert len(slack.posts()) == 1
    assert rows(db_url, select(SlackAttemptRow.event)) == [(SlackEvent.SWEEP,)]


def test_resolve_at_intake_owes_a_notice_only_when_slack_is_on(db_url: str, tmp_path: Path, slack: FakeSlack) -> None:
    for settings, expected in ((slack_settings(db_url, tmp_path, slack), 1), (make_settings(db_url, tmp_path), 0)):
        truncate(db_url)
        with TestClient(create_app(settings, dispatcher=_NoDispatch())) as client:
            firing = post_webhook(client, make_payload("resolve-owed", alerts=[make_alert("fp-o")])).json()
            assert slack_owed(db_url, firing["incident_id"]) == (0, None)  # only a finished investigation owes
            for _ in range(2):  # the second resolve changes nothing
                post_webhook(client, make_payload("resolve-owed", alerts=[make_alert("fp-o", status="resolved")]))
        count, since = slack_owed(db_url, firing["incident_id"])
        assert count == expected and (since is not None) == bool(expected)
