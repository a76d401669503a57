"""The delivery's log and state tell the truth across a lost commit (docs/slack.md, "Exactly once"),
against real PostgreSQL and the fake Slack: the database connection of the delivery is killed
right after Slack accepted a post, or while the transaction that records it commits. In bot mode
the retry finds the message by its key and updates it, posting nothing new; in webhook mode it
posts again (one duplicate at most), and says so. "Up to date" is logged only once recorded."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError

from rca.notify import once
from rca.notify.service import deliver
from rca.store.db import get_engine
from tests.fakes.slack import FakeSlack
from tests.helpers.slack import of_incident, slack_owed, slack_settings
from tests.notify.test_once import kill_open_transactions, lose_the_commit_of, posted_incident, sends_of

SERVICE_LOG = "rca.notify.service"


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(once, "_warned", set())


@pytest.fixture
def lose_the_next_commit_after_a_post(pg_db: str, slack: FakeSlack) -> Iterator[list[int]]:
    """Once Slack accepted a post, the next COMMIT on the database (the delivery's, recording it)
    has its connection killed just before it is sent: the commit fails."""
    armed: list[bool] = []
    killed: list[int] = []

    def accepted(method: str, _answer: dict[str, Any]) -> None:
        if method == "chat.postMessage" and not killed:
            armed.append(True)

    def commit(_conn: Any) -> None:
        if armed and not killed:
            killed.append(kill_open_transactions(pg_db))

    slack.on_accepted = accepted
    engine = get_engine(pg_db)
    event.listen(engine, "commit", commit)
    yield killed
    event.remove(engine, "commit", commit)


def said(caplog: pytest.LogCaptureFixture, words: str, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if words in r.getMessage() and r.levelno == level]


def check_found_once_and_updated(pg_db: str, slack: FakeSlack, settings: Any, incident_id: int, caplog: Any) -> None:
    """After the lost record: nothing said "up to date", the warning says sent but not recorded; the
    retry posts nothing new, updates the one message Slack has, and only then says so."""
    assert said(caplog, "up to date") == []
    [warning] = said(caplog, "sent, not yet recorded", logging.WARNING)
    [accepted] = of_incident(slack.posts(), incident_id)
    [send] = sends_of(pg_db, incident_id)
    assert send.outcome is None and f"incident {incident_id}: post ts=" in warning  # sending, open

    caplog.clear()
    assert deliver(settings, incident_id, "investigation").status == "delivered"
    assert of_incident(slack.posts(), incident_id) == [accepted]  # exactly one message
    [update] = slack.updates()
    ts = accepted.answer.split('"ts": "')[1].split('"')[0]
    assert update.payload["ts"] == ts
    assert [s.outcome for s in sends_of(pg_db, incident_id)] == ["found"]
    [line] = said(caplog, "up to date")
    assert line == f"slack: incident {incident_id} up to date (post found ts={ts}, update ts={ts})"
    assert slack_owed(pg_db, incident_id)[1] is None


def test_bot_post_lost_right_after_slack_accepted_it(
    pg_db: str, tmp_path: Path, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rca.notify")
    settings = slack_settings(pg_db, tmp_path, slack, slack_channel="C0OUTBOX01")
    incident_id = posted_incident(pg_db)
    killed = lose_the_commit_of(pg_db, slack)
    with pytest.raises(DBAPIError):
        deliver(settings, incident_id, "investigation")
    assert killed == [1]
    check_found_once_and_updated(pg_db, slack, settings, incident_id, caplog)


def test_bot_post_lost_while_its_record_commits(
    pg_db: str,
    tmp_path: Path,
    slack: FakeSlack,
    caplog: pytest.LogCaptureFixture,
    lose_the_next_commit_after_a_post: list[int],
) -> None:
    caplog.set_level(logging.INFO, logger="rca.notify")
    settings = slack_settings(pg_db, tmp_path, slack, slack_channel="C0OUTBOX01")
    incident_id = posted_incident(pg_db)
    with pytest.raises(DBAPIError):
        deliver(settings, incident_id, "investigation")
    assert lose_the_next_commit_after_a_post == [1]
    check_found_once_and_updated(pg_db, slack, settings, incident_id, caplog)


def test_webhook_post_lost_right_after_slack_accepted_it_is_posted_again_once(
    pg_db: str, tmp_path: Path, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    """At least once, as documented: the webhook cannot be read, so the open send is settled
    unverified and the message posted again: one duplicate, said in the log, never more."""
    caplog.set_level(logging.INFO, logger="rca.notify")
    settings = slack_settings(pg_db, tmp_path, slack, mode="webhook")
    incident_id = posted_incident(pg_db)
    killed = lose_the_commit_of(pg_db, slack, method="webhook")
    with pytest.raises(DBAPIError):
        deliver(settings, incident_id, "investigation")
    assert killed == [1] and said(caplog, "up to date") == []
    assert said(caplog, f"incident {incident_id}: post sent, not yet recorded", logging.WARNING)
    assert [s.outcome for s in sends_of(pg_db, incident_id)] == [None]  # sending, open

    assert deliver(settings, incident_id, "investigation").status == "delivered"
    assert deliver(settings, incident_id, "investigation").status == "unchanged"
    assert len(slack.webhook_posts()) == 2  # the one duplicate the protocol cannot rule out
    assert [s.outcome for s in sends_of(pg_db, incident_id)] == ["unverified", "posted"]
    assert said(caplog, "may have been posted already", logging.WARNING)
    assert said(caplog, "up to date") == [f"slack: incident {incident_id} up to date (post)"]
