"""Bot-mode posts once (rca/notify/once.py) against real PostgreSQL and the fake Slack: when Slack
accepted a message and the transaction that records it is lost (its connection killed at that very
moment), the next delivery finds the message by the key in its metadata and posts nothing new;
when the channel cannot be read it posts again (at least once, logged); when the database cannot
record the send, nothing is posted."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError

from rca.notify import once
from rca.notify.service import deliver
from rca.store import sends
from rca.store.db import get_engine
from rca.store.models import SlackAttemptRow, SlackDeliveryRow, SlackSendRow
from tests.fakes.slack import Failure, FakeSlack
from tests.helpers.databases import rows
from tests.helpers.slack import (
    of_incident,
    owe_slack,
    resolve,
    slack_owed,
    slack_settings,
    store_incident,
    store_investigation,
)
from tests.helpers.waiting import wait_for


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(once, "_warned", set())  # "logged once" starts over for each test


def attempts(url: str, incident_id: int) -> list[tuple[str, str, int | None]]:
    query = (
        select(SlackAttemptRow.action, SlackAttemptRow.outcome, SlackAttemptRow.http_status)
        .join(SlackDeliveryRow)
        .where(SlackDeliveryRow.incident_id == incident_id)
        .order_by(SlackAttemptRow.id)
    )
    return [tuple(row) for row in rows(url, query)]


def delivery(url: str, incident_id: int) -> Any:
    found = rows(url, select(SlackDeliveryRow.__table__).where(SlackDeliveryRow.incident_id == incident_id))
    return found[0] if found else None


def sends_of(url: str, incident_id: int) -> list[Any]:
    return rows(
        url, select(SlackSendRow.__table__).where(SlackSendRow.incident_id == incident_id).order_by(SlackSendRow.id)
    )


def kill_open_transactions(url: str) -> int:
    """Terminate this database's backends that sit in an open transaction: a delivery waiting on
    Slack. Its COMMIT then fails, as when PostgreSQL goes away at that moment."""
    with get_engine(url).connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        return len(
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND state = 'idle in transaction' AND pid <> pg_backend_pid()"
                )
            ).all()
        )


def lose_the_commit_of(url: str, slack: FakeSlack, reply: bool = False, method: str = "chat.postMessage") -> list[int]:
    """Arm the fake Slack: the first post it accepts (a thread reply if `reply`; `method` "webhook"
    for an incoming webhook's) kills the delivering transaction before the sender hears back.
    Returns the kills made."""
    killed: list[int] = []

    def strike(called: str, answer: dict[str, Any]) -> None:
        threaded = bool(answer.get("message", {}).get("thread_ts"))
        if called == method and threaded == reply and not killed:
            killed.append(kill_open_transactions(url))

    slack.on_accepted = strike
    return killed


def posted_incident(url: str) -> int:
    incident_id = store_incident(url)
    store_investigation(url, incident_id, ["queue_median"], ["arrival_surge", "batching_misconfig"])
    owe_slack(url, incident_id)
    return incident_id


def test_a_normal_post_carries_its_key_and_reads_nothing(pg_db: str, tmp_path: Path, slack: FakeSlack) -> None:
    settings = slack_settings(pg_db, tmp_path, slack)
    incident_id = posted_incident(pg_db)
    assert deliver(settings, incident_id, "investigation").status == "delivered"

    [post] = slack.posts()
    [send] = sends_of(pg_db, incident_id)
    assert post.payload["metadata"] == {"event_type": "rca_notice", "event_payload": {"key": send.key}}
    answer = json.loads(post.answer)
    assert (send.outcome, send.channel, send.channel_id, send.ts) == (
        "posted",
        "#llm-alerts",
        answer["channel"],
        answer["ts"],
    )
    assert slack.reads() == [] and attempts(pg_db, incident_id) == [("post", "ok", 200)]
    assert slack_owed(pg_db, incident_id)[1] is None


def test_a_post_slack_accepted_but_the_database_lost_is_found_by_its_key_not_posted_again(
    pg_db: str, tmp_path: Path, slack: FakeSlack
) -> None:
    settings = slack_settings(pg_db, tmp_path, slack)
    earlier = posted_incident(pg_db)  # a post to the channel by name tells its ID
    assert deliver(settings, earlier, "investigation").status == "delivered"
    incident_id = posted_incident(pg_db)
    killed = lose_the_commit_of(pg_db, slack)

    with pytest.raises(DBAPIError):
        deliver(settings, incident_id, "investigation")
    assert killed == [1]
    [accepted] = of_incident(slack.posts(), incident_id)  # Slack has the message; the database not
    assert delivery(pg_db, incident_id) is None and slack_owed(pg_db, incident_id)[1] is not None
    [send] = sends_of(pg_db, incident_id)  # committed before the post, on its own
    assert send.outcome is None

    assert deliver(settings, incident_id, "investigation").status == "delivered"
    assert of_incident(slack.posts(), incident_id) == [accepted]  # nothing posted again
    [read] = slack.reads()
    answer = json.loads(accepted.answer)
    assert read.path == "/api/conversations.history" and read.payload["channel"] == answer["channel"]
    assert read.payload["include_all_metadata"] == "1" and float(read.payload["oldest"]) < float(answer["ts"])
    row = delivery(pg_db, incident_id)
    assert (row.status, row.channel, row.ts, row.messages) == ("delivered", answer["channel"], answer["ts"], 1)
    # Found, it is updated to the present (it shows the incident as it was when it was posted).
    assert attempts(pg_db, incident_id) == [("find", "ok", 200), ("update", "ok", 200)]
    [found] = slack.updates()
    assert found.payload["ts"] == answer["ts"]
    assert [s.outcome for s in sends_of(pg_db, incident_id)] == ["found"]
    assert slack_owed(pg_db, incident_id)[1] is None  # the notice is settled

    # The adopted message is the incident's message: a change updates it and replies in its thread.
    store_investigation(pg_db, incident_id, ["queue_median", "cpu_bound_ratio"], ["cpu_launch_overhead"])
    assert deliver(settings, incident_id, "investigation").status == "delivered"
    [_, update] = slack.updates()
    [reply] = slack.replies()
    assert update.payload["ts"] == answer["ts"] and reply.payload["thread_ts"] == answer["ts"]


def test_a_thread_reply_accepted_but_lost_is_found_in_the_thread(pg_db: str, tmp_path: Path, slack: FakeSlack) -> None:
    settings = slack_settings(pg_db, tmp_path, slack)
    incident_id = posted_incident(pg_db)
    assert deliver(settings, incident_id, "investigation").status == "delivered"
    resolve(pg_db, incident_id)
    owe_slack(pg_db, incident_id)
    killed = lose_the_commit_of(pg_db, slack, reply=True)

    with pytest.raises(DBAPIError):
        deliver(settings, incident_id, "resolved")
    assert killed == [1] and len(slack.replies()) == 1

    assert deliver(settings, incident_id, "resolved").status == "delivered"
    [reply] = slack.replies()  # the resolved notice once
    [read] = slack.reads()
    assert read.path == "/api/conversations.replies" and read.payload["ts"] == reply.payload["thread_ts"]
    # chat.update edits in place: sent again after the loss, it shows the same message (documented).
    assert len(slack.updates()) == 2
    assert delivery(pg_db, incident_id).resolved_notified_at is not None
    assert [(s.action, s.outcome) for s in sends_of(pg_db, incident_id)] == [("post", "posted"), ("reply", "found")]


def test_an_unreadable_channel_posts_again_and_says_so_once(
    pg_db: str, tmp_path: Path, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    """Without `channels:history` nobody can tell whether the lost post got through: it is posted
    again (at least once), and the log says why and what would fix it, once."""
    settings = slack_settings(pg_db, tmp_path, slack)
    slack.scopes = frozenset({"chat:write"})
    earlier = posted_incident(pg_db)
    assert deliver(settings, earlier, "investigation").status == "delivered"
    caplog.set_level(logging.WARNING, logger="rca.notify.once")
    for _ in range(2):
        incident_id = posted_incident(pg_db)
        lose_the_commit_of(pg_db, slack)
        with pytest.raises(DBAPIError):
            deliver(settings, incident_id, "investigation")
        slack.on_accepted = None
        assert deliver(settings, incident_id, "investigation").status == "delivered"
        assert len(of_incident(slack.posts(), incident_id)) == 2  # the documented at-least-once
        assert attempts(pg_db, incident_id) == [("find", "failed", 200), ("post", "ok", 200)]
        assert [s.outcome for s in sends_of(pg_db, incident_id)] == ["unverified", "posted"]
    warnings = [r.getMessage() for r in caplog.records if "cannot be searched" in r.getMessage()]
    assert len(warnings) == 1 and "missing_scope" in warnings[0] and "channels:history" in warnings[0]


def test_a_channel_name_never_posted_to_cannot_be_searched_and_posts_again(
    pg_db: str, tmp_path: Path, slack: FakeSlack
) -> None:
    """conversations.history takes a channel ID; a name is resolved from an earlier post there.
    Before any, the lost first post is sent again (a channel ID in the settings avoids that)."""
    settings = slack_settings(pg_db, tmp_path, slack)
    incident_id = posted_incident(pg_db)
    lose_the_commit_of(pg_db, slack)
    with pytest.raises(DBAPIError):
        deliver(settings, incident_id, "investigation")
    assert deliver(settings, incident_id, "investigation").status == "delivered"
    assert len(of_incident(slack.posts(), incident_id)) == 2 and slack.reads() == []

    by_id = slack_settings(pg_db, tmp_path, slack, slack_channel="C0ONCE0001")
    other = posted_incident(pg_db)
    lose_the_commit_of(pg_db, slack)
    with pytest.raises(DBAPIError):
        deliver(by_id, other, "investigation")
    assert deliver(by_id, other, "investigation").status == "delivered"
    assert len(of_incident(slack.posts(), other)) == 1 and len(slack.reads()) == 1


def test_a_post_that_timed_out_is_looked_for_until_it_can_no_longer_arrive(
    pg_db: str, tmp_path: Path, slack: FakeSlack
) -> None:
    """A post whose answer never came may still land (Slack stored it after our timeout): the next
    attempt finds it, or, while it could still arrive, looks again later instead of posting."""
    settings = slack_settings(pg_db, tmp_path, slack, slack_channel="C0ONCE0002", slack_timeout_seconds=0.5)
    incident_id = posted_incident(pg_db)
    slack.delay = 2.0  # the post is stored 2 s after it arrives, long after the sender gave up
    assert deliver(settings, incident_id, "investigation", attempt=1).status == "retrying"
    slack.delay = 0.0
    waiting = deliver(settings, incident_id, "investigation", attempt=2)  # not there yet, may come
    assert waiting.status == "retrying" and 0 < waiting.retry_in <= 2.5 and slack.posts() == []
    wait_for(lambda: slack.posts(), 5, "the late post to land")
    assert deliver(settings, incident_id, "investigation", attempt=3).status == "delivered"
    assert len(slack.posts()) == 1
    assert attempts(pg_db, incident_id) == [
        ("post", "retry", None),
        ("find", "ok", 200),
        ("find", "ok", 200),
        ("update", "ok", 200),  # the found message, brought up to date
    ]


def test_a_post_that_failed_with_500_is_posted_after_the_search_finds_nothing(
    pg_db: str, tmp_path: Path, slack: FakeSlack
) -> None:
    settings = slack_settings(pg_db, tmp_path, slack, slack_channel="C0ONCE0003", slack_timeout_seconds=0.5)
    incident_id = posted_incident(pg_db)
    slack.fail_next(Failure(500, error="internal_error"))  # Slack may have stored it: look first
    assert deliver(settings, incident_id, "investigation", attempt=1).status == "retrying"
    waiting = deliver(settings, incident_id, "investigation", attempt=2)
    assert waiting.status == "retrying" and waiting.retry_in is not None
    time.sleep(waiting.retry_in)
    assert deliver(settings, incident_id, "investigation", attempt=3).status == "delivered"
    assert len(slack.posts()) == 1
    assert attempts(pg_db, incident_id) == [
        ("post", "retry", 500),
        ("find", "ok", 200),
        ("find", "ok", 200),
        ("post", "ok", 200),
    ]
    assert [s.outcome for s in sends_of(pg_db, incident_id)] == ["absent", "posted"]


def test_nothing_is_posted_when_the_send_cannot_be_recorded(pg_db: str, tmp_path: Path, slack: FakeSlack) -> None:
    """The send is committed before the post; if the database cannot take it (here: a lock held on
    the incident outlasts the lock timeout), the delivery fails before Slack is called, and the
    notice stays owed."""
    settings = slack_settings(pg_db, tmp_path, slack)
    incident_id = store_incident(pg_db)
    assert deliver(settings, incident_id, "investigation").status == "skipped"  # the delivery row exists
    store_investigation(pg_db, incident_id, ["queue_median"], ["arrival_surge"])
    owe_slack(pg_db, incident_id)
    held, release = threading.Event(), threading.Event()

    def hold_the_incident() -> None:
        with get_engine(pg_db).connect() as conn, conn.begin():
            conn.execute(text("SELECT id FROM incidents WHERE id = :id FOR UPDATE"), {"id": incident_id})
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_incident)
    holder.start()
    try:
        assert held.wait(10)
        with pytest.raises(DBAPIError, match="lock timeout"):
            deliver(settings, incident_id, "investigation")
    finally:
        release.set()
        holder.join(10)
    assert slack.received == [] and sends_of(pg_db, incident_id) == []
    assert slack_owed(pg_db, incident_id)[1] is not None
    assert deliver(settings, incident_id, "investigation").status == "delivered"
    assert len(slack.posts()) == 1


def test_webhook_posts_carry_no_key_but_are_recorded(pg_db: str, tmp_path: Path, slack: FakeSlack) -> None:
    """An incoming webhook cannot read the channel: its posts carry no key, but are recorded as
    sending before the call and sent after it, like the bot's."""
    settings = slack_settings(pg_db, tmp_path, slack, mode="webhook")
    incident_id = posted_incident(pg_db)
    assert deliver(settings, incident_id, "investigation").status == "delivered"
    [post] = slack.webhook_posts()
    [send] = sends_of(pg_db, incident_id)
    assert "metadata" not in post.payload and (send.action, send.outcome) == ("post", "posted")
    assert sends.CHANNEL_ID.fullmatch("C0ONCE0001") and not sends.CHANNEL_ID.fullmatch("#llm-alerts")
