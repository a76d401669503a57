"""The real Redis the Celery tests use as their broker: a database of the session's own. Redis is
required (TEST_REDIS_URL); when it is absent the tests that need it fail, never skip."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import pytest
import redis

# A URL with a database number pins it; otherwise the session claims a spare, empty one.
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379")
REDIS_DB_PREFERENCE = (11, 12, 13, 14, 15, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
REDIS_CLAIM_KEY = "rca-tests:claimed-by"
CLOSED_PORT_BROKER_URL = "redis://127.0.0.1:1/0"


def claim_redis_db(pinned_offset: int = 0) -> tuple[str, redis.Redis]:
    """The pinned database (plus `pinned_offset`, so that two workers of one session get two), or
    the first empty one we can mark as ours (so that concurrent test sessions, each with its own
    worker consuming the same queue name, never share a broker)."""
    parts = urlsplit(REDIS_URL)
    pinned = parts.path.strip("/")
    candidates = [(int(pinned) + pinned_offset) % 16] if pinned else list(REDIS_DB_PREFERENCE)
    token = uuid.uuid4().hex
    for db in candidates:
        url = parts._replace(path=f"/{db}").geturl()
        client = redis.Redis.from_url(url, socket_connect_timeout=3)
        try:
            client.ping()
        except redis.RedisError as exc:
            error = str(exc)
        else:
            error = None
        if error is not None:
            pytest.fail(f"Redis is required for these tests and is not reachable at {url}: {error}", pytrace=False)
        if pinned:
            client.flushdb()
            return url, client
        if client.dbsize() == 0 and client.set(REDIS_CLAIM_KEY, token, nx=True, ex=900):
            return url, client
        client.close()
    pytest.fail(
        f"no empty Redis database to use at {REDIS_URL} (tried {candidates}); set TEST_REDIS_URL", pytrace=False
    )


@contextmanager
def own_redis_db() -> Iterator[str]:
    """A Redis database claimed for the caller (`claim_redis_db`), flushed and let go afterwards."""
    url, client = claim_redis_db()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()
