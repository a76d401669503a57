"""What waits in one of the service's queues: how many items and since when, as the store counts
them (an investigation still queued, a Slack notice still owed) and the metrics show them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from rca.domain.clock import utcnow


@dataclass(frozen=True)
class Waiting:
    depth: int  # items waiting
    oldest_age: float  # seconds the oldest has waited; 0 when none waits

    @classmethod
    def since(cls, depth: int, oldest: datetime | None) -> Waiting:
        """`depth` items, the oldest waiting since `oldest` (None when none waits; a time still
        ahead, a delivery deferred to it, counts as not waiting yet)."""
        return cls(depth, max(0.0, (utcnow() - oldest).total_seconds()) if oldest is not None else 0.0)
