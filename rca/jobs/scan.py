"""The early-warning scan on a schedule (rca/scan): every RCA_SCAN_INTERVAL_SECONDS, on a thread
of the scheduler (`rca beat`, run by `rca worker`) while it holds the scheduler lock, or of
`rca serve` in the embedded mode. On whenever RCA_PROMETHEUS_URL is set, unless
RCA_SCAN_ENABLED=false. What a scan opens is dispatched after its commit, like intake's."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from rca.collect.prometheus import short_error
from rca.config import Settings
from rca.domain.status import SlackEvent
from rca.scan.service import EarlyWarnings

log = logging.getLogger(__name__)


def run_scans(
    settings: Settings,
    enqueue: Callable[[int], object],
    notify: Callable[[int, str], object],
    stop: threading.Event,
    leading: Callable[[], bool] = lambda: True,
) -> None:
    """Scan every interval while `leading()` (the scheduler lock is held) until `stop` is set;
    a failed scan (Prometheus or the database down) is logged and the next one tries again."""
    warnings: EarlyWarnings | None = None
    while not stop.is_set():
        if not leading():
            warnings = None  # another scheduler may move the states meanwhile: read them again when back
        else:
            try:
                warnings = warnings or EarlyWarnings.from_settings(settings)
                _, actions = warnings.tick(datetime.now(UTC))
                for investigation_id in actions.investigations:
                    enqueue(investigation_id)
                for incident_id in actions.resolved:
                    notify(incident_id, SlackEvent.RESOLVED)
            except Exception as exc:
                log.warning("scan failed: %s: %s", type(exc).__name__, short_error(exc))
        stop.wait(settings.scan_interval_seconds)


def start_scans(
    settings: Settings,
    enqueue: Callable[[int], object],
    notify: Callable[[int, str], object],
    stop: threading.Event,
    leading: Callable[[], bool] = lambda: True,
) -> threading.Thread | None:
    """The scan thread, started when the scan is on (`Settings.scan_active`)."""
    if not settings.scan_active:
        return None
    thread = threading.Thread(
        target=run_scans, args=(settings, enqueue, notify, stop, leading), name="scan", daemon=True
    )
    thread.start()
    log.info("scan: every %gs", settings.scan_interval_seconds)
    return thread
