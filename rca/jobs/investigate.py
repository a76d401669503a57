"""The investigate job: run one stored investigation, close it as failed when it cannot finish,
and hand a finished one to Slack."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from rca import metrics
from rca.config import Settings
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
    `running`, and the sweeper takes it up if the retries run out); any other closes it as
    `failed`. Also after a redelivery ("skipped"), the notice is queued again: the first run may
    have died before queueing it, and delivery sends nothing when Slack already shows this evidence.
    """
    started = time.perf_counter()
    try:
        with lease_renewed(settings, investigation_id):
            status = run_investigation(settings, investigation_id)
    except retryable:
        raise
    except Exception as exc:
        record_failure(settings, investigation_id, exc, time.perf_counter() - started)
        return InvestigationStatus.FAILED
    queue_notice_of(settings, investigation_id, queue_notice)
    return status


def record_failure(settings: Settings, investigation_id: int, exc: Exception, seconds: float) -> None:
    """Close the investigation as failed after an error no retry can fix (a bug, bad data, the
    time limit); called from the `except` block, so that the log has the traceback."""
    log.exception("investigation %s failed", investigation_id)
    with session_scope(settings.effective_database_url) as session:
        investigations.mark_failed(session, investigation_id, f"{type(exc).__name__}: {exc}", final=True)
    metrics.investigation_finished(InvestigationStatus.FAILED, seconds)
