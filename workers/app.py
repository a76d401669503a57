"""The Celery app: Redis broker, late acks, one message at a time per worker process.

Late acks plus `task_reject_on_worker_lost` mean a worker that dies mid-investigation leaves the
message to be redelivered; the task is idempotent, so redelivery is safe.
"""

from __future__ import annotations

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

from rca import metrics
from rca.config import Settings, get_settings
from rca.store.db import forget_engines_after_fork


def create_app(settings: Settings | None = None) -> Celery:
    settings = settings or get_settings()
    app = Celery("rca", broker=settings.broker_url or "memory://", include=["workers.tasks"])
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # Bound an investigation: the soft limit lets the task record the failure, the hard one kills it.
        task_soft_time_limit=settings.investigation_timeout_seconds,
        task_time_limit=settings.investigation_timeout_seconds + 30,
        task_default_queue="investigations",
        task_routes={"rca.sweep": {"queue": "investigations"}, "rca.slack_notify": {"queue": "slack"}},
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": 600},
        beat_schedule={
            "sweep-stranded-investigations": {"task": "rca.sweep", "schedule": float(settings.sweep_after_seconds)},
        },
        worker_hijack_root_logger=False,
    )
    return app


app = create_app()


@worker_process_init.connect
def _fresh_connections_in_child(**_kwargs: object) -> None:
    forget_engines_after_fork()


@worker_process_shutdown.connect
def _metrics_of_exiting_child(pid: int, **_kwargs: object) -> None:
    """prometheus-client's multiprocess mode: an exiting pool child drops its live gauges."""
    metrics.mark_process_dead(pid)
