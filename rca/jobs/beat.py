"""The scheduler (`rca beat`, and the one `rca worker` runs beside its consumers): one at a time
in the whole deployment, sweeping every RCA_SWEEP_INTERVAL_SECONDS by itself.

- **Single.** It sweeps only while it holds the scheduler lock (rca/store/locks.py, a PostgreSQL
  advisory lock). A second scheduler, another `rca worker` or one started after a crash, stands by
  and takes over when the holder dies (the database releases the lock with its session).
- **No backlog ahead of it.** It runs the sweep in its own process and only enqueues what it
  found; no sweep task waits behind a FIFO queue of investigations.
- **It dies with its parent.** Started by `rca worker`, it is killed when that process dies
  (`PR_SET_PDEATHSIG`, and `parent_pid` checked each tick where that is not available), so a
  crashed worker leaves no orphaned scheduler behind.
"""

from __future__ import annotations

import logging
import os
import threading

from celery import Celery

from rca.config import Settings
from rca.jobs.celery_app import INVESTIGATE, INVESTIGATIONS_QUEUE, SLACK_NOTIFY, SLACK_QUEUE, run_sweep
from rca.jobs.scan import start_scans
from rca.store.locks import SingletonLock

log = logging.getLogger(__name__)
LOCK_NAME = "scheduler"


def run_scheduler(settings: Settings, app: Celery, stop: threading.Event, parent_pid: int | None = None) -> None:
    """Sweep every interval while holding the lock, stand by while another scheduler holds it;
    return when `stop` is set or the parent is gone."""
    lock = SingletonLock(settings.effective_database_url, LOCK_NAME)
    state = "starting"  # "holding" or "standing by", logged when it changes
    holding = threading.Event()  # the early-warning scan (rca/jobs/scan.py) runs only while set
    start_scans(
        settings,
        lambda investigation_id: app.send_task(INVESTIGATE, args=[investigation_id], queue=INVESTIGATIONS_QUEUE),
        lambda incident_id, event: (
            settings.slack_enabled and app.send_task(SLACK_NOTIFY, args=[incident_id, event], queue=SLACK_QUEUE)
        ),
        stop,
        holding.is_set,
    )
    try:
        while not stop.is_set():
            if parent_pid is not None and os.getppid() != parent_pid:
                log.warning("scheduler: parent %s is gone; exiting", parent_pid)
                return
            try:
                if lock.acquire():
                    holding.set()
                    if state != "holding":
                        log.info("scheduler: holding the lock; sweeping every %gs", settings.sweep_interval_seconds)
                        state = "holding"
                    swept = run_sweep(app, settings)
                    if swept:
                        log.info("scheduler: re-enqueued %d", swept)
                else:
                    holding.clear()
                if not holding.is_set() and state != "standing by":
                    log.info("scheduler: another scheduler holds the lock; standing by")
                    state = "standing by"
            except Exception as exc:  # the database or the broker blinked: try again next tick
                log.warning("scheduler: sweep failed: %s: %s", type(exc).__name__, exc)
            stop.wait(settings.sweep_interval_seconds)
    finally:
        lock.release()
