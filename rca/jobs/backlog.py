"""Which investigations the broker still holds: waiting in the investigations queue (at any of its
priorities) or delivered to a worker and not yet acknowledged. The sweep leaves those alone: an
investigation queued a while ago behind a long backlog is late, not lost, and re-enqueueing it
would only hand the workers a copy to skip (issue 35: "re-enqueued 136" on every sweep of a busy
queue).

Read from Redis as kombu's Redis transport keeps a queue: one list per priority step, and the
`unacked` hash of messages delivered but not acknowledged (late acks), each a Celery protocol 2
message whose body (base64 JSON) holds the task's arguments. Another broker, or a Redis that does
not answer, tells nothing: None, and the sweep judges by age alone, as before.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterable
from typing import Any

from celery import Celery

log = logging.getLogger(__name__)


def held_investigations(app: Celery, task: str, queue: str) -> set[int] | None:
    """The ids of the investigations whose `task` message the broker holds for `queue`; None when
    it cannot tell."""
    try:
        with app.connection_for_read() as connection:
            if connection.transport_cls not in ("redis", "rediss"):
                return None
            channel: Any = connection.default_channel  # kombu's Redis channel: its queue names and keys
            client = channel.client
            lists = [channel._q_for_pri(queue, priority) for priority in channel.priority_steps]
            waiting = [raw for name in lists for raw in client.lrange(name, 0, -1)]
            delivered = [_unwrapped(raw) for raw in client.hvals(channel.unacked_key)]
    except Exception as exc:  # the broker blinked: the sweep falls back on age alone
        log.warning("sweep: could not read the broker's queue: %s: %s", type(exc).__name__, exc)
        return None
    return set(_investigation_ids(waiting + delivered, task))


def _unwrapped(raw: bytes) -> Any:
    """An `unacked` entry is [message, exchange, routing key]."""
    entry = json.loads(raw)
    return entry[0] if isinstance(entry, list) and entry else None


def _investigation_ids(messages: Iterable[Any], task: str) -> Iterable[int]:
    for message in messages:
        try:
            document = json.loads(message) if isinstance(message, bytes | str) else message
            if document.get("headers", {}).get("task") != task:
                continue
            body = document["body"]
            if document.get("properties", {}).get("body_encoding") == "base64":
                body = base64.b64decode(body)
            args = json.loads(body)[0]
            yield int(args[0])
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            continue  # not a message of ours: nothing to protect
