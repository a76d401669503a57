"""The investigate job: run one stored investigation, close it as failed when it cannot finish,
and hand a finished one to Slack."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from rca import metrics
from rca.config import Settings
from rca.domain.clock import utcnow
from rca.domain.status import InvestigationStatus
from rca.jobs.lease import lease_renewed
from rca.jobs.slack import queue_notice_of
from rca.pipeline import run_investigation
from rca.store import investigations
from rca.store.db import session_scope

log = logging.getLogger(__name__)

QueueNotice = Callable[[int, str], bool]  # (incident id, event) -> whether the Slack notice was queued


def investigate(
    settings: Settings, investigation_id: int, queue_notice: QueueNotice, retryable: tuple[type[Exception], ...] = ()
) -> str:
    """Run the investigation; returns its final status ("skipped" when it was already done).

    An error in `retryable` propagates, for a runner that retries (the investigation stays
    `running`, its lease released, and the sweeper takes it up if the retries run out); any other
    closes it as `failed`, and Slack is told. Also after a redelivery ("skipped"), the notice is
    queued again: the first run may have died before queueing it, and delivery sends nothing when
    Slack already shows this evidence.
    """
    started, claimed_since = time.perf_counter(), utcnow()
    try:
        with lease_renewed(settings, investigation_id):
            status = run_investigation(settings, investigation_id)
    except retryable as exc:
        release_claim(settings, investigation_id, exc, claimed_since)
        raise
    except Exception as exc:
        record_failure(settings, investigation_id, exc, time.perf_counter() - started)
        status = InvestigationStatus.FAILED
    queue_notice_of(settings, investigation_id, queue_notice)
    return status


def release_claim(settings: Settings, investigation_id: int, exc: Exception, claimed_since: datetime) -> None:
    """Before a retry: end this run's lease (claimed since `claimed_since`, not an earlier run's)
    so that the retry may claim it at once, a live lease turning every other claim away, and keep
    the error as its reason. Best effort: with the database down this fails too, and the lease
    lapses by itself."""
    try:
        with session_scope(settings.effective_database_url) as session:
            investigations.release(session, investigation_id, f"{type(exc).__name__}: {exc}", claimed_since)
    except Exception as release_error:
        log.info("investigation %s: lease not released: %s", investigation_id, type(release_error).__name__)


def record_failure(settings: Settings, investigation_id: int, exc: Exception, seconds: float) -> None:
    """Close the investigation as failed after an error no retry can fix (a bug, bad data, the
    time limit), owing Slack the notice that says so; called from the `except` block, so that the
    log has the traceback."""
    log.exception("investigation %s failed", investigation_id)
    with session_scope(settings.effective_database_url) as session:
        investigations.mark_failed(
            session, investigation_id, f"{type(exc).__name__}: {exc}", owe_slack=settings.slack_enabled
        )
    metrics.investigation_finished(InvestigationStatus.FAILED, seconds)
