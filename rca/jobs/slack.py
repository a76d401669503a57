"""The Slack jobs: queue the notice of a finished investigation, and deliver one. How often a
delivery is retried, and after how long, is Slack's answer as `rca.notify.service.deliver` reads
it (`Outcome.retry_in`); each runner only waits that long."""

from __future__ import annotations

import logging
from collections.abc import Callable

from rca.config import Settings
from rca.domain.status import SlackEvent
from rca.notify.service import deliver, finished_incident

log = logging.getLogger(__name__)


def queue_notice_of(settings: Settings, investigation_id: int, queue_notice: Callable[[int, str], bool]) -> None:
    """After an investigation is saved, hand its incident to Slack. Never raises: a Slack or broker
    problem must not turn a finished investigation into a failed one. A notice lost here is not
    lost: saving the investigation recorded it as owed, and the sweep queues it (rca.store.notices)."""
    if not settings.slack_enabled:
        return
    try:
        incident_id = finished_incident(settings, investigation_id)
        if incident_id is not None:
            queue_notice(incident_id, SlackEvent.INVESTIGATION)
    except Exception as exc:
        log.warning("could not queue the Slack notice of investigation %s: %s", investigation_id, exc)


def deliver_with_retries(settings: Settings, incident_id: int, event: str, wait: Callable[[float], bool]) -> None:
    """Deliver, retrying as Slack's answers say; `wait(seconds)` returns True to stop waiting (the
    process is stopping: the delivery row says `retrying`, the next notice finishes it)."""
    attempt = 1
    while True:
        try:
            outcome = deliver(settings, incident_id, event, attempt)
        except Exception:
            log.exception("Slack delivery for incident %s failed", incident_id)
            return
        if outcome.retry_in is None or wait(outcome.retry_in):
            return
        attempt += 1
