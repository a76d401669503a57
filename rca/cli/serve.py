"""`rca serve`: the webhook, the API and the incident pages, in one process or several."""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
from pathlib import Path
from typing import Any

from rca.cli.checks import can_listen, check_auth_settings, prepare_database, warn_if_blind
from rca.cli.common import Command, fail
from rca.cli.logs import setup_logging
from rca.cli.multiprocess import multiprocess_metrics
from rca.config import Settings
from rca.startup import checked_settings

log = logging.getLogger("rca")


def add_parser(command: Command) -> None:
    serve = command(
        "serve",
        "run the HTTP service (webhook + search API)",
        "Serve the Alertmanager webhook and the search API. Without RCA_BROKER_URL investigations "
        "run in-process; without RCA_DATABASE_URL the store is SQLite under RCA_DATA_DIR.",
    )
    serve.add_argument("--host", help="listen address (default: RCA_HOST, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default: RCA_PORT, else 8080)")
    serve.add_argument(
        "--workers",
        type=int,
        help="server processes sharing the port (default: one per CPU with RCA_BROKER_URL, else 1: the embedded "
        "queue runs in the one process)",
    )
    serve.set_defaults(func=run)


def usable_cpus() -> int:
    """The CPUs this process may run on, capped by a container's CPU limit (cgroup v2 `cpu.max`),
    which the affinity mask does not show."""
    count = len(os.sched_getaffinity(0))
    with contextlib.suppress(OSError, ValueError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            count = min(count, max(1, math.ceil(int(quota) / int(period))))
    return count


def default_serve_workers(settings: Settings) -> int:
    """One server process per usable CPU; one with the embedded queue, whose investigations and
    sweeper live inside the server process."""
    return 1 if settings.embedded_queue else usable_cpus()


def serve_app() -> Any:
    """The app of one worker process of `rca serve --workers N`, which uvicorn imports by this
    name: the settings are read again from the environment the parent checked."""
    from rca.pages.site import create_site

    settings = checked_settings()
    setup_logging(settings)
    return create_site(settings)


def run(settings: Settings, args: argparse.Namespace) -> None:
    import uvicorn

    check_auth_settings(settings)
    workers = args.workers if args.workers is not None else default_serve_workers(settings)
    if workers < 1:
        fail("--workers: give 1 or more")
    if workers > 1 and settings.embedded_queue:
        fail("--workers: more than 1 needs RCA_BROKER_URL (the embedded queue runs inside the one server process)")
    prepare_database(settings)
    host, port, level = args.host or settings.host, args.port or settings.port, settings.log_level.lower()
    can_listen(host, port)
    warn_if_blind(settings)  # after what stops the start, so that a refusal stays one line
    mode = "embedded queue" if settings.embedded_queue else "celery"
    log.info(
        "serving on %s:%s (%s, database %s, %d worker process%s)",
        host,
        port,
        mode,
        "sqlite" if settings.effective_database_url.startswith("sqlite") else "postgresql",
        workers,
        "" if workers == 1 else "es",
    )
    if workers == 1:
        from rca.pages.site import create_site

        uvicorn.run(create_site(settings), host=host, port=port, log_level=level)
        return
    # Each worker process counts its own requests; /metrics, answered by any of them, sums them all.
    multiprocess_metrics(settings, "serve-metrics")
    uvicorn.run(
        "rca.cli.serve:serve_app",
        factory=True,
        workers=workers,
        host=host,
        port=port,
        log_level=level,
        timeout_worker_healthcheck=settings.serve_worker_healthcheck_seconds,
    )
