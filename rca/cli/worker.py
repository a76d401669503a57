"""`rca worker`: a Celery consumer per queue and the scheduler, as children of one supervisor."""

from __future__ import annotations

import argparse
import os
import sys

from rca.cli.checks import prepare_database, warn_if_blind
from rca.cli.common import Command, fail
from rca.cli.multiprocess import metrics_slot, multiprocess_metrics, serve_worker_metrics
from rca.cli.supervisor import die_with_parent, supervise
from rca.config import Settings
from rca.jobs.queues import INVESTIGATIONS_QUEUE, SLACK_QUEUE

RCA_COMMAND = (sys.executable, "-m", "rca")


def add_parser(command: Command) -> None:
    worker = command(
        "worker",
        "run the Celery workers for investigations and Slack, and the scheduler",
        "Consume investigations and Slack deliveries from RCA_BROKER_URL, each queue with a Celery "
        "worker process of its own; with the scheduler, also re-enqueue investigations whose enqueue "
        "was lost or whose worker died, and Slack notices still owed (one scheduler sweeps at a time).",
    )
    worker.add_argument("--concurrency", type=int, default=2, help="investigations run at once")
    worker.add_argument(
        "--slack-concurrency", type=int, default=2, help="Slack deliveries at once (a pool of their own)"
    )
    worker.add_argument("--hostname", default="rca@%h", help="Celery node name (%%h: this host's name)")
    worker.add_argument(
        "--queues",
        default=f"{INVESTIGATIONS_QUEUE},{SLACK_QUEUE}",
        help="comma-separated queues to consume, a Celery worker process each (Slack deliveries have their own)",
    )
    worker.add_argument("--no-beat", action="store_true", help="do not run the scheduler (the sweeper)")
    worker.add_argument("--role", choices=["consumer"], help=argparse.SUPPRESS)
    worker.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    worker.set_defaults(func=run)


def run(settings: Settings, args: argparse.Namespace) -> None:
    """Supervise one Celery worker process per queue (investigations; Slack with its own small
    pool, so that a hanging Slack never takes an investigation's place) and the scheduler
    (`rca beat`); they die with this process and it stops them all when one of them exits."""
    if settings.embedded_queue:
        fail("RCA_BROKER_URL: not set; `rca worker` needs a broker (without one, `rca serve` investigates in-process)")
    if args.role == "consumer":
        die_with_parent(args.parent_pid)
        _run_consumer(settings, args)
        return
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    if not queues:
        fail("--queues: name at least one queue")
    metrics_port = None
    if settings.worker_metrics_port:
        metrics_port, directory = metrics_slot(settings)
        multiprocess_metrics(settings, directory)
    prepare_database(settings)
    if metrics_port is not None:
        serve_worker_metrics(settings, metrics_port)
    warn_if_blind(settings)  # after what stops the start, so that a refusal stays one line
    me = str(os.getpid())
    children: dict[str, list[str]] = {}
    for queue in queues:
        concurrency = args.slack_concurrency if queue == SLACK_QUEUE else args.concurrency
        children[f"worker {queue}"] = [
            *RCA_COMMAND,
            "worker",
            "--role=consumer",
            f"--parent-pid={me}",
            f"--queues={queue}",
            f"--concurrency={concurrency}",
            f"--hostname={consumer_hostname(args.hostname, queue, queues[0])}",
        ]
    if not args.no_beat:
        children["scheduler"] = [*RCA_COMMAND, "beat", f"--parent-pid={me}"]
    raise SystemExit(supervise(children))


def consumer_hostname(hostname: str, queue: str, first: str) -> str:
    """The first queue's worker keeps the node name (health checks ping it); the others get
    theirs from it: `rca@host` -> `rca-slack@host`."""
    if queue == first:
        return hostname
    name, at, host = hostname.partition("@")
    return f"{name}-{queue}{at}{host}"


def _run_consumer(settings: Settings, args: argparse.Namespace) -> None:
    """One Celery worker on one queue; its parent prepared the database and serves the metrics."""
    from rca.jobs.celery_app import create_app

    argv = ["worker", "--loglevel", settings.log_level.upper(), "--concurrency", str(args.concurrency)]
    argv += ["--queues", args.queues, "--hostname", args.hostname]
    create_app(settings).worker_main(argv)
