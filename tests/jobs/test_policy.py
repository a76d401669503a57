"""The retry policy of the jobs (`rca.jobs.policy`): its total backoff outlasts a database failover."""

from __future__ import annotations

import random

from rca.jobs.policy import (
    BACKOFF_CAP,
    MAX_RETRIES,
    MAX_TOTAL_BACKOFF,
    MIN_TOTAL_BACKOFF,
    backoff_ceiling,
    retry_delay,
)


def test_the_retries_outlast_a_minute_long_outage_whatever_the_jitter() -> None:
    assert MIN_TOTAL_BACKOFF > 60
    rng = random.Random(16)
    for _ in range(2000):
        delays = [retry_delay(n, rng) for n in range(MAX_RETRIES)]
        assert sum(delays) > 60
        assert MIN_TOTAL_BACKOFF <= sum(delays) <= MAX_TOTAL_BACKOFF
        assert all(0 < d <= BACKOFF_CAP for d in delays)


def test_the_backoff_grows_exponentially_from_two_seconds_to_its_cap() -> None:
    lowest = [retry_delay(n, random.Random(0)) for n in range(12)]
    assert 1 <= lowest[0] <= 2 and 2 <= lowest[1] <= 4 and 4 <= lowest[2] <= 8
    assert all(30 <= d <= BACKOFF_CAP for d in lowest[5:])
    # A 15 s outage is outlasted by the first five retries, however the jitter falls.
    assert sum(backoff_ceiling(n) / 2 for n in range(5)) >= 15
