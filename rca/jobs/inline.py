"""The embedded runner: investigations on background threads of the API process, run by the same
investigation runner as the Celery task (rca/jobs/runner.py: the same claim, lease, failure and
retries, a retry waiting its backoff on the thread), Slack on a thread of its own, and a sweeper
thread for what a previous process accepted but never ran or never told Slack."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from rca.config import Settings
from rca.domain.status import SlackEvent
from rca.jobs.runner import InvestigationRunner
from rca.jobs.scan import start_scans
from rca.jobs.slack import deliver_with_retries
from rca.jobs.sweep import owed_notices, sweep

log = logging.getLogger(__name__)


class InlineDispatcher:
    def __init__(self, settings: Settings, workers: int = 2) -> None:
        self.settings = settings
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="investigate")
        self.runner = InvestigationRunner(settings, self.notify)
        # One thread for Slack: deliveries queue up behind a rate limit instead of piling onto it.
        self.slack_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slack")
        self._stop = threading.Event()
        self._sweeper = threading.Thread(target=self._sweep_forever, name="sweeper", daemon=True)
        self._sweeper.start()
        self._scanner = start_scans(settings, self.enqueue, self.notify, self._stop)  # early warnings (rca/scan)

    def enqueue(self, investigation_id: int) -> bool:
        self.pool.submit(self.runner.run, investigation_id, self._stop.wait)
        return True

    def notify(self, incident_id: int, event: str) -> bool:
        if not self.settings.slack_enabled:
            return False
        self.slack_pool.submit(deliver_with_retries, self.settings, incident_id, event, self._stop.wait)
        return True

    def _sweep_forever(self) -> None:
        # The first sweep at start-up picks up what a previous process accepted but never ran.
        older_than = timedelta(0)
        while not self._stop.is_set():
            try:
                found = sweep(self.settings, older_than)
                for investigation_id in found.requeued:
                    self.enqueue(investigation_id)
                for incident_id in found.gave_up + owed_notices(self.settings, older_than):
                    self.notify(incident_id, SlackEvent.SWEEP)  # on the one Slack thread, behind any other delivery
            except Exception as exc:
                log.warning("sweep failed: %s", exc)
            older_than = timedelta(seconds=self.settings.sweep_after_seconds)
            self._stop.wait(self.settings.sweep_interval_seconds)

    def close(self) -> None:
        self._stop.set()
        self.pool.shutdown(wait=True, cancel_futures=False)
        self.slack_pool.shutdown(wait=True, cancel_futures=False)
