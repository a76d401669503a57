"""The Slack messages a delivery is about to post (`slack_sends`), recorded before the call so that
a message Slack accepted is found again after the record of it was lost (rca/notify/once.py).

`record` commits on a connection of its own (PostgreSQL): the delivery's transaction, which holds
the incident's `slack_deliveries` row locked during its Slack calls, may well be the one that
never commits. The row refers to the incident, which that transaction does not lock (it only
holds KEY SHARE on it, which the foreign key check shares). On SQLite (one process, no server to
lose between the post and the commit) it is written in the delivery's own transaction.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime

from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from rca.domain.clock import utcnow
from rca.store.db import session_scope
from rca.store.models import SlackSendRow

UNKNOWN = None  # the outcome of a send whose answer was never recorded
POSTED, FOUND, NOT_SENT, ABSENT, UNVERIFIED = "posted", "found", "not_sent", "absent", "unverified"
CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{6,}")  # a conversation ID, as conversations.history needs
LOCK_TIMEOUT = "5s"  # the incident row's KEY SHARE is never held long; never wait on it for ever


def record(
    session: Session, url: str, incident_id: int, action: str, channel: str, thread_ts: str | None
) -> SlackSendRow:
    """A new key for the message about to be posted, committed before it is (raises when the
    database cannot take it: then nothing is posted, and the notice stays owed)."""
    send = SlackSendRow(
        incident_id=incident_id, key=str(uuid.uuid4()), action=action, channel=channel, thread_ts=thread_ts, at=utcnow()
    )
    if session.get_bind().dialect.name == "sqlite":
        session.add(send)
        session.flush()
        return send
    with session_scope(url) as own:
        own.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        own.add(send)
    return send


def unknown(session: Session, incident_id: int, action: str, thread_ts: str | None) -> list[SlackSendRow]:
    """Sends of this message whose outcome was never recorded, oldest first."""
    return list(
        session.scalars(
            select(SlackSendRow)
            .where(
                SlackSendRow.incident_id == incident_id,
                SlackSendRow.action == action,
                SlackSendRow.thread_ts.is_(None) if thread_ts is None else SlackSendRow.thread_ts == thread_ts,
                SlackSendRow.outcome.is_(UNKNOWN),
            )
            .order_by(SlackSendRow.id)
        )
    )


def settle(
    session: Session, keys: list[str], outcome: str, channel_id: str | None = None, ts: str | None = None
) -> None:
    """Record how these sends ended, in the delivery's transaction (with what it sent)."""
    if keys:
        session.execute(
            update(SlackSendRow)
            .where(SlackSendRow.key.in_(keys))
            .values(outcome=outcome, channel_id=channel_id, ts=ts)
            .execution_options(synchronize_session=False)
        )


def channel_id(session: Session, channel: str) -> str | None:
    """The ID of a channel given by name (conversations.history takes IDs only), as Slack answered
    an earlier post there; the channel itself when it is an ID already."""
    if CHANNEL_ID.fullmatch(channel):
        return channel
    return session.scalar(
        select(SlackSendRow.channel_id)
        .where(SlackSendRow.channel == channel, SlackSendRow.channel_id.is_not(None))
        .order_by(SlackSendRow.id.desc())
        .limit(1)
    )


def age(send: SlackSendRow, now: datetime | None = None) -> float:
    """Seconds since the send was recorded."""
    return ((now or utcnow()) - send.at).total_seconds()
