"""The one backoff of every retry in the service: exponential from `base` seconds, capped at
`cap`, each wait drawn between half and all of that value ("equal jitter"). Clients that failed
together (workers after a database failover, investigations after an LLM outage) spread out,
and the waits keep a floor, half the exponential value, so a run of retries cannot all land
within a few seconds as with full jitter. Each dependency declares its own bases and bounds once:
the jobs in `rca.jobs.policy` (`JOB_RETRIES`), the LLM in `rca.analyst.client` (`BACKOFF`, after
the server's Retry-After), Slack in `rca.notify.service` (`slack_backoff`, after Slack's
Retry-After). Prometheus alone does not wait: one immediate retry, urllib3's, declared as
`rca.collect.prometheus.PROMETHEUS_RETRY`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    base: float  # seconds before the first retry (before jitter)
    cap: float  # no wait is longer

    def ceiling(self, retries: int) -> float:
        """The longest wait before retry number `retries + 1` (0 for the first retry)."""
        return min(self.cap, self.base * 2.0 ** min(retries, 32))

    def delay(self, retries: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number `retries + 1`: between half and all of the ceiling."""
        ceiling = self.ceiling(retries)
        return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)

    def min_total(self, retries: int) -> float:
        """The shortest that `retries` retries can wait together, however the jitter falls."""
        return sum(self.ceiling(n) / 2 for n in range(retries))

    def max_total(self, retries: int) -> float:
        """The longest that `retries` retries can wait together."""
        return sum(self.ceiling(n) for n in range(retries))
