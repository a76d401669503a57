"""Posts recorded before they are sent, and bot-mode posts effectively once: a message Slack
accepted is never posted again because the record of it was lost.

chat.postMessage has no idempotency key. So before each post (the incident's message, a thread
reply) a send is committed with a new key (rca/store/sends.py), and the message carries the key in
its metadata. If the database is down the send cannot be recorded and nothing is posted: the
notice stays owed. Slack's answer is recorded with what the delivery sent, in its transaction.
When that transaction is lost after Slack accepted the message (the database went away, the
worker died), the send stays without an outcome, and the next delivery of the same message
first reads the channel (conversations.history; conversations.replies for a reply) around the
send's time, with the messages' metadata, and adopts the message that carries the key instead
of posting again (the delivery then updates an adopted incident message to the present).

An incoming webhook's posts are recorded the same way (a key of ours, sent nowhere), but nothing
can read its channel: a send found without an outcome is settled `unverified` and posted again, at
least once (docs/slack.md, "Exactly once").

Where the channel cannot be read (the token lacks `channels:history`, the bot is not in the
channel, a channel given by name whose ID no earlier post told us) the post is sent again: at
least once, logged once per channel and reason. A read that fails for a while (Slack down,
rate-limited) is retried like a failed post.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from rca.config import Settings
from rca.notify.delivery import Sender, SendResult
from rca.store import sends
from rca.store.models import SlackSendRow

log = logging.getLogger(__name__)

# Seconds before the recorded time and after the call's timeout within which the message's ts may
# lie: clocks differ, and Slack may store a request that arrived late.
WINDOW_MARGIN = 60.0
IN_FLIGHT_GRACE = 2.0  # seconds past the call's timeout after which an earlier send has surely ended
WEBHOOK = "(incoming webhook)"  # the channel of a webhook's sends: the one it was created for
_warned: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Earlier:
    """What the channel says about earlier sends of a message whose outcome was lost: `read` the
    HTTP call made (None: none was needed); `ts`/`channel` the message when found; `wait` seconds
    to look again when an earlier send may still be in flight."""

    read: SendResult | None = None
    ts: str | None = None
    channel: str | None = None
    wait: float | None = None


def look_for_earlier(
    session: Session,
    settings: Settings,
    sender: Sender,
    incident_id: int,
    action: str,
    channel: str,
    thread_ts: str | None,
) -> Earlier:
    """Before posting: whether an earlier send of this message reached Slack. Settles the earlier
    sends when the answer is certain (found, absent, or unverifiable: then posted again)."""
    pending = sends.unknown(session, incident_id, action, thread_ts)
    if not pending:
        return Earlier()
    keys = [s.key for s in pending]
    if sender.mode == "webhook":
        _at_least_once(session, keys, channel, "an incoming webhook cannot read it")
        return Earlier()
    channel_id = sends.channel_id(session, channel)
    if channel_id is None:
        _at_least_once(session, keys, channel, "a channel name whose ID no earlier post told")
        return Earlier()
    oldest = pending[0].at.timestamp() - WINDOW_MARGIN
    latest = pending[-1].at.timestamp() + settings.slack_timeout_seconds + WINDOW_MARGIN
    lookup = sender.find(channel_id, keys, oldest, latest, thread_ts)
    read = lookup.result
    if not read.ok:
        if not read.retryable:
            _at_least_once(session, keys, channel, f"reading it failed: {read.error}")
        return Earlier(read=read)  # retryable: Slack is struggling, look again on the next attempt
    if lookup.ts is not None:  # logged by the delivery once this is recorded
        sends.settle(session, keys, sends.FOUND, channel_id, lookup.ts)
        return Earlier(read=read, ts=lookup.ts, channel=channel_id)
    if not lookup.complete:
        _at_least_once(session, keys, channel, "more messages around the send than one search reads")
        return Earlier(read=read)
    in_flight = settings.slack_timeout_seconds + IN_FLIGHT_GRACE - sends.age(pending[-1])
    if in_flight > 0:  # its HTTP call may not have ended yet: the message may still come
        return Earlier(read=read, wait=in_flight)
    sends.settle(session, keys, sends.ABSENT)
    return Earlier(read=read)


def begin(
    session: Session, settings: Settings, incident_id: int, action: str, channel: str, thread_ts: str | None
) -> SlackSendRow:
    """Commit the send about to be made; raises (and nothing is posted) if the database cannot."""
    return sends.record(session, settings.effective_database_url, incident_id, action, channel, thread_ts)


def end(session: Session, send: SlackSendRow, result: SendResult) -> None:
    """Record Slack's answer to the send, unless it may have posted without saying so."""
    if result.ok:
        sends.settle(session, [send.key], sends.POSTED, result.channel, result.ts)
    elif not result.maybe_delivered:
        sends.settle(session, [send.key], sends.NOT_SENT)


def _at_least_once(session: Session, keys: list[str], channel: str, why: str) -> None:
    """Post again without knowing: settle the earlier sends as unverified, and say so once."""
    sends.settle(session, keys, sends.UNVERIFIED)
    if (channel, why) not in _warned:
        _warned.add((channel, why))
        log.warning(
            "slack: a message to %s may have been posted already, but the channel cannot be searched for it "
            "(%s): posting it again, so it may show twice. Exactly-once posts need the bot token's "
            "channels:history scope (groups:history for a private channel), the bot in the channel, and "
            "the channel's ID or one earlier post there (docs/slack.md)",
            channel,
            why,
        )
