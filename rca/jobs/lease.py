"""The heartbeat of a running investigation: its claim carries a lease (`investigations.claim`),
renewed here while the job runs. When the worker dies, kill -9 or a lost machine, the renewals
stop, the lease lapses within RCA_INVESTIGATION_LEASE_SECONDS, and the next sweep hands the
investigation to another worker: a crash costs a lease and a sweep interval, not minutes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from rca.config import Settings
from rca.store import investigations
from rca.store.db import session_scope

log = logging.getLogger(__name__)


@contextmanager
def lease_renewed(settings: Settings, investigation_id: int) -> Iterator[None]:
    """Renew the investigation's lease every third of its length while the block runs. A renewal
    that fails (the database blinked) is tried again at the next beat; one lease covers two misses."""
    lease = timedelta(seconds=settings.investigation_lease_seconds)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(lease.total_seconds() / 3):
            try:
                with session_scope(settings.effective_database_url) as session:
                    investigations.renew_lease(session, investigation_id, lease)
            except Exception as exc:
                log.warning("investigation %s: lease not renewed: %s", investigation_id, type(exc).__name__)

    thread = threading.Thread(target=beat, name=f"lease-{investigation_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
