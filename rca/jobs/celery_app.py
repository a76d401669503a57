"""The Celery runner: Redis broker, late acks, one message at a time per worker process, and the
three tasks as thin wires over the job bodies. They take ids and reload state, so a retried or
redelivered task never duplicates findings or hypotheses.

The investigate task is an adapter over the investigation runner (rca/jobs/runner.py), which
owns the claim, its lease, the run, the save, the failure and the retry policy; the same runner
runs investigations in-process (rca/jobs/inline.py).

Late acks plus `task_reject_on_worker_lost` mean a worker that dies mid-investigation leaves the
message to be redelivered; the task is idempotent, so redelivery is safe. `workers.app` is this
app for `celery -A workers.app`; `rca worker` starts it directly.

Investigations and Slack deliveries have their own queues, and `rca worker` consumes each with a
Celery worker process of its own (rca/cli/worker.py): a Slack that hangs holds only the Slack pool. The
sweep runs in the scheduler (`rca beat`, rca/jobs/beat.py), not behind the investigations queue.
Transient errors are retried with `rca.jobs.policy`'s backoff, long enough for a database failover:
the Slack task as `retry_transient` says, an investigation as its runner decides.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import Celery, Task
from celery.signals import worker_process_init, worker_process_shutdown

from rca import metrics
from rca.config import Settings, get_settings
from rca.domain.status import SlackEvent
from rca.jobs.backlog import held_investigations
from rca.jobs.policy import JOB_RETRIES
from rca.jobs.queues import INVESTIGATIONS_QUEUE, SLACK_QUEUE
from rca.jobs.runner import InvestigationRunner, RetryAfter
from rca.jobs.sweep import owed_notices, sweep
from rca.notify.service import deliver
from rca.store.db import forget_engines_after_fork

INVESTIGATE, SLACK_NOTIFY, SWEEP = "rca.investigate", "rca.slack_notify", "rca.sweep"
# Redis serves a queue's priority 0 before 3, 6 and 9 (kombu's priority steps). The investigations
# the sweep hands back (a crashed run, a lost enqueue) go before those intake queues, so that a
# backlog of new alerts never delays a takeover.
PRIORITY_SWEPT, PRIORITY_NEW = 0, 6


def create_app(settings: Settings) -> Celery:
    app = Celery("rca", broker=settings.broker_url or "memory://")
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # Bound an investigation: the soft limit lets the task record the failure, the hard one kills it.
        task_soft_time_limit=settings.investigation_timeout_seconds,
        task_time_limit=settings.investigation_timeout_seconds + 30,
        task_default_queue=INVESTIGATIONS_QUEUE,
        # `rca.sweep` is for an operator's one-off sweep; the scheduler sweeps without a queue.
        task_routes={SWEEP: {"queue": INVESTIGATIONS_QUEUE}, SLACK_NOTIFY: {"queue": SLACK_QUEUE}},
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": 600},
        worker_hijack_root_logger=False,
    )
    _register_tasks(app)
    return app


def _register_tasks(app: Celery) -> None:
    """The tasks read the process's settings (`get_settings`) when they run, as the worker does."""

    def queue_slack_notice(incident_id: int, event: str) -> bool:
        slack_notify.apply_async(args=(incident_id, event), queue=SLACK_QUEUE, retry=False)
        return True

    @app.task(name=INVESTIGATE, bind=True)
    def investigate_task(self: Task, investigation_id: int) -> str:
        """One attempt of the investigation runner (rca.jobs.runner); a retry it asks for is a
        Celery retry after the delay it chose (the error itself once none is left)."""
        runner = InvestigationRunner(get_settings(), queue_slack_notice)
        outcome = runner.attempt(investigation_id, retries=self.request.retries)
        if isinstance(outcome, RetryAfter):
            raise self.retry(exc=outcome.error, countdown=outcome.delay, max_retries=runner.policy.max_retries)
        return outcome

    @app.task(name=SLACK_NOTIFY, bind=True, soft_time_limit=120, time_limit=150)
    def slack_notify(self: Task, incident_id: int, event: str) -> str:
        """Bring the incident's Slack message up to date (see `rca.notify.service`). Retries itself
        with Slack's Retry-After or exponential backoff, at most RCA_SLACK_MAX_ATTEMPTS tries; a
        database blip retries like an investigation does."""
        settings = get_settings()
        try:
            outcome = deliver(settings, incident_id, event, attempt=self.request.retries + 1)
        except JOB_RETRIES.transient as exc:
            raise retry_transient(self, exc) from exc
        if outcome.retry_in is not None:
            raise self.retry(countdown=outcome.retry_in, max_retries=settings.slack_max_attempts)
        return outcome.status

    @app.task(name=SWEEP)
    def sweep_task() -> int:
        """One sweep now, on a worker (the scheduler sweeps by itself, see `run_sweep`)."""
        return run_sweep(app, get_settings())


def retry_transient(task: Task, exc: Exception) -> Exception:
    """The task's retry after a database or broker error, with the policy's backoff (rca.jobs.policy);
    the error itself once its retries are used up."""
    retries = task.request.retries
    return task.retry(exc=exc, countdown=JOB_RETRIES.delay(retries), max_retries=JOB_RETRIES.max_retries)


def run_sweep(app: Celery, settings: Settings) -> int:
    """Re-enqueue investigations whose enqueue was lost (broker down at intake; never one the
    broker still holds, however long its backlog) or whose worker died (their lease lapsed), ahead
    of the new ones, and the Slack notices owed that no task delivered (rca.store.notices), those
    of investigations given up first."""
    older_than = timedelta(seconds=settings.sweep_after_seconds)
    found = sweep(settings, older_than, lambda: held_investigations(app, INVESTIGATE, INVESTIGATIONS_QUEUE))
    for investigation_id in found.requeued:
        app.send_task(INVESTIGATE, args=[investigation_id], queue=INVESTIGATIONS_QUEUE, priority=PRIORITY_SWEPT)
    owed = found.gave_up + owed_notices(settings, older_than)
    for incident_id in owed:
        app.send_task(SLACK_NOTIFY, args=[incident_id, SlackEvent.SWEEP], queue=SLACK_QUEUE)
    return len(found.requeued) + len(owed)


@worker_process_init.connect
def _fresh_connections_in_child(**_kwargs: Any) -> None:
    forget_engines_after_fork()


@worker_process_shutdown.connect
def _metrics_of_exiting_child(pid: int, **_kwargs: Any) -> None:
    """prometheus-client's multiprocess mode: an exiting pool child drops its live gauges."""
    metrics.mark_process_dead(pid)
