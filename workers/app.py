"""The Celery app for `celery -A workers.app` (compose's health check, operators' own tooling):
the process's settings, checked at start-up, and the tasks of `rca.jobs.celery_app`. `rca worker`
builds the same app itself."""

from __future__ import annotations

from rca.config import get_settings
from rca.jobs.celery_app import create_app
from rca.startup import check

app = create_app(check(get_settings()))
