"""The sweep job: find investigations whose enqueue was lost or whose worker died, and Slack
notices owed that no task delivered, for their runner to enqueue again. An investigation handed
out RCA_INVESTIGATION_MAX_ATTEMPTS times is closed as failed instead (rca.incidents.investigations)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from datetime import timedelta

from rca import metrics
from rca.config import Settings
from rca.domain.status import InvestigationStatus
from rca.incidents import investigations, notices
from rca.store.db import session_scope

log = logging.getLogger(__name__)


def sweep(
    settings: Settings, older_than: timedelta, held: Callable[[], Collection[int] | None] | None = None
) -> investigations.Stranded:
    """Claim stranded investigations: those to re-enqueue (never one the broker still holds, which
    `held` reads: rca.jobs.backlog), and the incidents of those given up (their Slack notice, saying the
    investigation failed, is owed; the runner queues it)."""
    with session_scope(settings.effective_database_url) as session:
        found = investigations.stranded(
            session, older_than, settings.investigation_max_attempts, owe_slack=settings.slack_enabled, held=held
        )
    metrics.SWEEPER_REENQUEUED.inc(len(found.requeued))
    for incident_id in found.gave_up:
        log.error("sweep: gave up the investigation of incident %s after repeated attempts", incident_id)
        metrics.INVESTIGATIONS.labels(status=InvestigationStatus.FAILED).inc()
    return found


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
