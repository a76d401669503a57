"""Which errors a job may retry, and how often: declared once for both runners.

The retries must outlast a typical database failover (30 to 60 s) or broker restart. Celery's
own `retry_backoff` draws each delay uniformly between 0 and the exponential value ("full
jitter"), so five tries can all land within a few seconds: under a 15 s outage some tasks used
them all up. Here each delay is exponential from 2 s, capped at 60 s, and drawn between half
and all of that value ("equal jitter"): workers recovering together still spread out, and the
total is bounded below, MIN_TOTAL_BACKOFF seconds (121) over MAX_RETRIES tries, well past a minute.
"""

from __future__ import annotations

import random

from sqlalchemy.exc import OperationalError

# Errors worth retrying: the database or broker blinked. Anything else is a bug or bad data.
TRANSIENT: tuple[type[Exception], ...] = (OperationalError, ConnectionError, TimeoutError)
MAX_RETRIES = 8
BACKOFF_BASE = 2.0  # seconds before the first retry (before jitter)
BACKOFF_CAP = 60.0  # no wait is longer: a task retried this late still finishes within minutes


def backoff_ceiling(retries: int) -> float:
    """The longest wait before retry number `retries + 1` (0 for the first retry)."""
    return min(BACKOFF_CAP, BACKOFF_BASE * 2.0 ** min(retries, 32))


def retry_delay(retries: int, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry number `retries + 1`: between half and all of the ceiling."""
    ceiling = backoff_ceiling(retries)
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


MIN_TOTAL_BACKOFF = sum(backoff_ceiling(n) / 2 for n in range(MAX_RETRIES))
MAX_TOTAL_BACKOFF = sum(backoff_ceiling(n) for n in range(MAX_RETRIES))
