"""Celery tasks: thin wires over `rca.pipeline`. They take ids and reload state, so a retried or
redelivered task never duplicates findings or hypotheses."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from sqlalchemy.exc import OperationalError

from rca.config import get_settings
from rca.dispatch import notify_done
from rca.dispatch import sweep as sweep_stranded
from rca.notify.service import deliver
from rca.pipeline import record_failure, run_investigation
from workers.app import app

log = logging.getLogger(__name__)

# Errors worth retrying: the database or broker blinked. Anything else is a bug or bad data.
TRANSIENT = (OperationalError, ConnectionError, TimeoutError)
MAX_RETRIES = 5


@app.task(name="rca.investigate", bind=True, autoretry_for=TRANSIENT, retry_backoff=2, retry_backoff_max=60,
          retry_jitter=True, max_retries=MAX_RETRIES)
def investigate(self, investigation_id: int) -> str:  # type: ignore[no-untyped-def]
    settings = get_settings()
    started = time.perf_counter()
    try:
        status = run_investigation(settings, investigation_id)
    except TRANSIENT:
        raise
    except Exception as exc:
        record_failure(settings, investigation_id, exc, time.perf_counter() - started)
        return "failed"
    # Also after a redelivery ("skipped"): the first run may have died before queueing the notice,
    # and the Slack task sends nothing when Slack already shows this evidence.
    notify_done(settings, investigation_id, _queue_slack_notice)
    return status


def _queue_slack_notice(incident_id: int, event: str) -> bool:
    slack_notify.apply_async(args=[incident_id, event], queue="slack", retry=False)
    return True


@app.task(name="rca.slack_notify", bind=True, soft_time_limit=120, time_limit=150, autoretry_for=TRANSIENT,
          retry_backoff=2, retry_backoff_max=60, retry_jitter=True, max_retries=MAX_RETRIES)
def slack_notify(self, incident_id: int, event: str) -> str:  # type: ignore[no-untyped-def]
    """Bring the incident's Slack message up to date (see `rca.notify.service`). Retries itself
    with Slack's Retry-After or exponential backoff, at most RCA_SLACK_MAX_ATTEMPTS tries; a
    database blip retries like an investigation does."""
    settings = get_settings()
    outcome = deliver(settings, incident_id, event, attempt=self.request.retries + 1)
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in, max_retries=settings.slack_max_attempts)
    return outcome.status


@app.task(name="rca.sweep")
def sweep() -> int:
    """Re-enqueue investigations whose first enqueue was lost (broker down at intake)."""
    settings = get_settings()
    ids = sweep_stranded(settings, timedelta(seconds=settings.sweep_after_seconds))
    for investigation_id in ids:
        investigate.delay(investigation_id)
    return len(ids)
