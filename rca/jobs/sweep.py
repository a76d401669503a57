"""The sweep job: find investigations whose enqueue was lost, for their runner to enqueue again."""

from __future__ import annotations

from datetime import timedelta

from rca import metrics
from rca.config import Settings
from rca.store import investigations
from rca.store.db import session_scope


def sweep(settings: Settings, older_than: timedelta) -> list[int]:
    """Claim stranded investigations for re-enqueueing."""
    with session_scope(settings.effective_database_url) as session:
        ids = investigations.stranded(session, older_than)
    metrics.SWEEPER_REENQUEUED.inc(len(ids))
    return ids
