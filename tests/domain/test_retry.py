"""The service's one backoff (`rca.domain.retry`): exponential, capped, equal jitter."""

from __future__ import annotations

import random

from rca.domain.retry import Backoff


def test_each_wait_lies_between_half_and_all_of_the_capped_exponential() -> None:
    backoff = Backoff(base=0.5, cap=4.0)
    rng = random.Random(7)
    for retries, ceiling in enumerate([0.5, 1.0, 2.0, 4.0, 4.0, 4.0]):
        assert backoff.ceiling(retries) == ceiling
        waits = [backoff.delay(retries, rng) for _ in range(500)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits)
        assert max(waits) - min(waits) > ceiling / 4  # jittered, not in step
    assert backoff.min_total(3) == 1.75 and backoff.max_total(3) == 3.5
