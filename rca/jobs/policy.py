"""Which errors a job may retry, how often, and how long it waits: declared once, as `JOB_RETRIES`,
for both runners (the Celery tasks and the in-process runner of `rca serve`).

The retries must outlast a typical database failover (30 to 60 s) or broker restart. Celery's
own `retry_backoff` draws each delay uniformly between 0 and the exponential value ("full
jitter"), so five tries can all land within a few seconds: under a 15 s outage some tasks used
them all up. Here each delay is exponential from 2 s, capped at 60 s, and drawn between half
and all of that value ("equal jitter"): workers recovering together still spread out, and the
total is bounded below, `min_total` seconds (121) over `max_retries` tries, well past a minute.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sqlalchemy.exc import OperationalError


@dataclass(frozen=True)
class RetryPolicy:
    """Errors worth retrying, at most `max_retries` retries, and an equal-jitter exponential
    backoff from `base` seconds, capped at `cap`."""

    transient: tuple[type[Exception], ...]
    max_retries: int
    base: float  # seconds before the first retry (before jitter)
    cap: float  # no wait is longer

    def ceiling(self, retries: int) -> float:
        """The longest wait before retry number `retries + 1` (0 for the first retry)."""
        return min(self.cap, self.base * 2.0 ** min(retries, 32))

    def delay(self, retries: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number `retries + 1`: between half and all of the ceiling."""
        ceiling = self.ceiling(retries)
        return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)

    @property
    def min_total(self) -> float:
        """The shortest all the retries can wait together, however the jitter falls."""
        return sum(self.ceiling(n) / 2 for n in range(self.max_retries))

    @property
    def max_total(self) -> float:
        """The longest all the retries can wait together."""
        return sum(self.ceiling(n) for n in range(self.max_retries))


# The database or broker blinked: worth retrying. Anything else is a bug or bad data. A task
# retried as late as the cap still finishes within minutes.
JOB_RETRIES = RetryPolicy(
    transient=(OperationalError, ConnectionError, TimeoutError), max_retries=8, base=2.0, cap=60.0
)
