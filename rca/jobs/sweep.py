"""The sweep job: find investigations whose enqueue was lost, and Slack notices owed that no task
delivered, for their runner to enqueue again."""

from __future__ import annotations

from datetime import timedelta

from rca import metrics
from rca.config import Settings
from rca.store import investigations, notices
from rca.store.db import session_scope

SWEPT = "sweep"  # the event of a Slack delivery the sweeper queued, as `slack_attempts.event` records it


def sweep(settings: Settings, older_than: timedelta) -> list[int]:
    """Claim stranded investigations for re-enqueueing."""
    with session_scope(settings.effective_database_url) as session:
        ids = investigations.stranded(session, older_than)
    metrics.SWEEPER_REENQUEUED.inc(len(ids))
    return ids


def owed_notices(settings: Settings, older_than: timedelta) -> list[int]:
    """Claim the incidents whose Slack notice has been owed for longer than `older_than`: the
    enqueue after the commit was lost (broker down, a queue lost with Redis, a worker that died
    between the commit and the enqueue), or the task gave up on a database error. Their runner
    queues a Slack delivery for each; one that finds Slack up to date sends nothing."""
    if not settings.slack_enabled:
        return []
    with session_scope(settings.effective_database_url) as session:
        ids = notices.claim_owed(session, older_than)
    metrics.SWEEPER_SLACK_REQUEUED.inc(len(ids))
    return ids
