"""Hand investigations to whatever runs them: Celery when a broker is configured, otherwise a
thread pool inside the API process (the embedded mode).

Enqueueing happens only after the incident is committed. If it fails (broker down), the
investigation stays `queued` in the database and the sweeper enqueues it again later, so an
accepted alert always reaches an investigation.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from rca.config import Settings
from rca.jobs.celery_app import INVESTIGATE, PRIORITY_NEW, SLACK_NOTIFY, SLACK_QUEUE, create_app
from rca.jobs.inline import InlineDispatcher

log = logging.getLogger(__name__)


class Dispatcher(Protocol):
    def enqueue(self, investigation_id: int) -> bool: ...

    def notify(self, incident_id: int, event: str) -> bool: ...

    def close(self) -> None: ...


class CeleryDispatcher:
    """Send the investigate and Slack tasks to the broker, by name."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app = create_app(settings)
        # Intake waits for this: with the broker down, fail at once (not after kombu's ~6 s of
        # reconnect sleeps); the investigation stays queued and the sweeper enqueues it later.
        self.app.conf.broker_transport_options = {**self.app.conf.broker_transport_options, "max_retries": 0}

    def enqueue(self, investigation_id: int) -> bool:
        try:
            self.app.send_task(INVESTIGATE, args=[investigation_id], retry=False, priority=PRIORITY_NEW)
        except Exception as exc:  # kombu raises many transport-specific types
            log.warning("enqueue of investigation %s failed, the sweeper will retry: %s", investigation_id, exc)
            return False
        return True

    def notify(self, incident_id: int, event: str) -> bool:
        """Queue a Slack delivery on the `slack` queue; a lost one only costs that notice."""
        if not self.settings.slack_enabled:
            return False
        try:
            self.app.send_task(SLACK_NOTIFY, args=[incident_id, event], queue=SLACK_QUEUE, retry=False)
        except Exception as exc:
            log.warning("enqueue of the Slack notice for incident %s failed: %s", incident_id, exc)
            return False
        return True

    def close(self) -> None:
        # kombu pools broker connections per URL for the whole process; force-closing that pool made
        # every later dispatcher (or app) on the same broker fail with "Acquire on closed pool".
        self.app.close()


def create_dispatcher(settings: Settings) -> Dispatcher:
    return InlineDispatcher(settings) if settings.embedded_queue else CeleryDispatcher(settings)


def enqueue_all(dispatcher: Dispatcher, investigation_ids: Sequence[int]) -> bool:
    """Hand every investigation of a round to the dispatcher (each, even after one failed: the
    sweep re-sends only those the broker lost); True when there were some and all went."""
    sent = [dispatcher.enqueue(investigation_id) for investigation_id in investigation_ids]
    return bool(sent) and all(sent)
