"""`rca beat`: the scheduler alone (`rca worker` runs one as its child)."""

from __future__ import annotations

import argparse
import signal
import threading

from rca.cli.checks import prepare_database
from rca.cli.common import Command, fail
from rca.cli.supervisor import die_with_parent
from rca.config import Settings


def add_parser(command: Command) -> None:
    beat = command(
        "beat",
        "run the scheduler alone",
        "Sweep every RCA_SWEEP_INTERVAL_SECONDS: re-enqueue investigations whose enqueue was lost or "
        "whose worker died, and Slack notices still owed. Any number may run: one holds the lock "
        "and sweeps, the others stand by. `rca worker` runs one itself unless --no-beat.",
    )
    beat.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    beat.set_defaults(func=run)


def run(settings: Settings, args: argparse.Namespace) -> None:
    if settings.embedded_queue:
        fail("RCA_BROKER_URL: not set; `rca beat` needs a broker (without one, `rca serve` sweeps in-process)")
    if args.parent_pid is not None:
        die_with_parent(args.parent_pid)
    else:
        prepare_database(settings)
    from rca.jobs.beat import run_scheduler
    from rca.jobs.celery_app import create_app

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    run_scheduler(settings, create_app(settings), stop, args.parent_pid)
