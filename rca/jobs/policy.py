"""Which errors a job may retry, how often, and how long it waits: declared once, as `JOB_RETRIES`,
for both runners (the Celery tasks and the in-process runner of `rca serve`).

The retries must outlast a typical database failover (30 to 60 s) or broker restart. Celery's
own `retry_backoff` draws each delay uniformly between 0 and the exponential value ("full
jitter"), so five tries can all land within a few seconds: under a 15 s outage some tasks used
them all up. Here each delay is the service's one backoff (rca.domain.retry: equal jitter),
exponential from 2 s and capped at 60 s: workers recovering together still spread out, and the
total is bounded below, `min_total` seconds (121) over `max_retries` tries, well past a minute.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sqlalchemy.exc import OperationalError

from rca.domain.retry import Backoff


@dataclass(frozen=True)
class RetryPolicy:
    """Errors worth retrying, at most `max_retries` retries, and the backoff between them."""

    transient: tuple[type[Exception], ...]
    max_retries: int
    backoff: Backoff

    def delay(self, retries: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number `retries + 1`."""
        return self.backoff.delay(retries, rng)

    @property
    def min_total(self) -> float:
        """The shortest all the retries can wait together, however the jitter falls."""
        return self.backoff.min_total(self.max_retries)

    @property
    def max_total(self) -> float:
        """The longest all the retries can wait together."""
        return self.backoff.max_total(self.max_retries)


# The database or broker blinked: worth retrying. Anything else is a bug or bad data. A task
# retried as late as the cap still finishes within minutes.
JOB_RETRIES = RetryPolicy(
    transient=(OperationalError, ConnectionError, TimeoutError), max_retries=8, backoff=Backoff(base=2.0, cap=60.0)
)
