"""The Celery app for `celery -A workers.app` (compose's health check, operators' own tooling):
the process's settings, checked at start-up, and the tasks of `rca.jobs.celery_app`. `rca worker`
builds the same app itself, one Celery worker process per queue (`celery -A workers.app worker -Q
investigations`, `-Q slack -c 2`) plus the scheduler (`rca beat`): docs/workers.md."""

from __future__ import annotations

from rca.cli.logs import quiet_library_loggers
from rca.config import get_settings
from rca.jobs.celery_app import create_app
from rca.startup import check

quiet_library_loggers()
app = create_app(check(get_settings()))
