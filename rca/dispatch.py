"""Hand investigations to whatever runs them: Celery when a broker is configured, otherwise a
thread pool inside the API process (the embedded mode).

Enqueueing happens only after the incident is committed. If it fails (broker down), the
investigation stays `queued` in the database and the sweeper enqueues it again later, so an
accepted alert always reaches an investigation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Protocol

from rca import metrics
from rca.config import Settings
from rca.store import investigations
from rca.store.db import session_scope

log = logging.getLogger(__name__)


class Dispatcher(Protocol):
    def enqueue(self, investigation_id: int) -> bool: ...

    def notify(self, incident_id: int, event: str) -> bool: ...

    def close(self) -> None: ...


class CeleryDispatcher:
    """Send `workers.tasks.investigate` to the broker."""

    def __init__(self, settings: Settings) -> None:
        from workers.app import create_app

        self.settings = settings
        self.app = create_app(settings)
        # Intake waits for this: with the broker down, fail at once (not after kombu's ~6 s of
        # reconnect sleeps); the investigation stays queued and the sweeper enqueues it later.
        self.app.conf.broker_transport_options = {**self.app.conf.broker_transport_options, "max_retries": 0}

    def enqueue(self, investigation_id: int) -> bool:
        try:
            self.app.send_task("rca.investigate", args=[investigation_id], retry=False)
        except Exception as exc:  # kombu raises many transport-specific types
            log.warning("enqueue of investigation %s failed, the sweeper will retry: %s", investigation_id, exc)
            return False
        return True

    def notify(self, incident_id: int, event: str) -> bool:
        """Queue a Slack delivery on the `slack` queue; a lost one only costs that notice."""
        if not self.settings.slack_enabled:
            return False
        try:
            self.app.send_task("rca.slack_notify", args=[incident_id, event], queue="slack", retry=False)
        except Exception as exc:
            log.warning("enqueue of the Slack notice for incident %s failed: %s", incident_id, exc)
            return False
        return True

    def close(self) -> None:
        # kombu pools broker connections per URL for the whole process; force-closing that pool made
        # every later dispatcher (or app) on the same broker fail with "Acquire on closed pool".
        self.app.close()


class InlineDispatcher:
    """Run investigations on background threads of this process, and sweep for stranded ones."""

    def __init__(self, settings: Settings, workers: int = 2) -> None:
        self.settings = settings
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="investigate")
        # One thread for Slack: deliveries queue up behind a rate limit instead of piling onto it.
        self.slack_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slack")
        self._stop = threading.Event()
        self._sweeper = threading.Thread(target=self._sweep_forever, name="sweeper", daemon=True)
        self._sweeper.start()

    def enqueue(self, investigation_id: int) -> bool:
        self.pool.submit(self._run, investigation_id)
        return True

    def _run(self, investigation_id: int) -> None:
        from rca.pipeline import record_failure, run_investigation

        started = time.perf_counter()
        try:
            run_investigation(self.settings, investigation_id)
        except Exception as exc:
            record_failure(self.settings, investigation_id, exc, time.perf_counter() - started)
            return
        notify_done(self.settings, investigation_id, self.notify)

    def notify(self, incident_id: int, event: str) -> bool:
        if not self.settings.slack_enabled:
            return False
        self.slack_pool.submit(self._deliver, incident_id, event)
        return True

    def _deliver(self, incident_id: int, event: str) -> None:
        """Run a Slack delivery with the same retry policy as the Celery task, on the Slack thread."""
        from rca.notify.service import deliver

        attempt = 1
        while True:
            try:
                outcome = deliver(self.settings, incident_id, event, attempt)
            except Exception:
                log.exception("Slack delivery for incident %s failed", incident_id)
                return
            if outcome.retry_in is None or self._stop.wait(outcome.retry_in):
                return  # done, or the process is stopping (the row says `retrying`)
            attempt += 1

    def _sweep_forever(self) -> None:
        # The first sweep at start-up picks up what a previous process accepted but never ran.
        older_than = timedelta(0)
        while not self._stop.is_set():
            try:
                for investigation_id in sweep(self.settings, older_than):
                    self.enqueue(investigation_id)
            except Exception as exc:
                log.warning("sweep failed: %s", exc)
            older_than = timedelta(seconds=self.settings.sweep_after_seconds)
            self._stop.wait(self.settings.sweep_after_seconds)

    def close(self) -> None:
        self._stop.set()
        self.pool.shutdown(wait=True, cancel_futures=False)
        self.slack_pool.shutdown(wait=True, cancel_futures=False)


def sweep(settings: Settings, older_than: timedelta) -> list[int]:
    """Claim stranded investigations for re-enqueueing."""
    with session_scope(settings.effective_database_url) as session:
        ids = investigations.stranded(session, older_than)
    metrics.SWEEPER_REENQUEUED.inc(len(ids))
    return ids


def notify_done(settings: Settings, investigation_id: int, notify: Callable[[int, str], bool]) -> None:
    """After an investigation is saved, hand its incident to Slack. Never raises: a Slack or broker
    problem must not turn a finished investigation into a failed one."""
    if not settings.slack_enabled:
        return
    try:
        from rca.notify.service import done_incident

        incident_id = done_incident(settings, investigation_id)
        if incident_id is not None:
            notify(incident_id, "investigation")
    except Exception as exc:
        log.warning("could not queue the Slack notice of investigation %s: %s", investigation_id, exc)


def create_dispatcher(settings: Settings) -> Dispatcher:
    return InlineDispatcher(settings) if settings.embedded_queue else CeleryDispatcher(settings)
