"""Which errors a job may retry, and how often: declared once for both runners."""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import OperationalError

# Errors worth retrying: the database or broker blinked. Anything else is a bug or bad data.
TRANSIENT: tuple[type[Exception], ...] = (OperationalError, ConnectionError, TimeoutError)
MAX_RETRIES = 5

# Celery's retry options for a task that retries TRANSIENT errors: exponential backoff from 2 s,
# at most 60 s apart, with jitter so that workers recovering together do not retry in step.
CELERY_RETRY: dict[str, Any] = {
    "autoretry_for": TRANSIENT,
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": MAX_RETRIES,
}
