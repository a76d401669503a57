"""What waits in one of the service's queues: how many items and since when, as the store counts
them (an investigation still queued, a Slack notice still owed) and the metrics show them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Waiting:
    depth: int  # items waiting
    oldest_age: float  # seconds the oldest has waited; 0 when none waits
