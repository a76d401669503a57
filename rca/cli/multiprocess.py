"""Metrics of a command that runs several processes (`rca serve --workers N`, `rca worker`):
prometheus-client's multiprocess mode, and the worker's own metrics port."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
import sys
from typing import TextIO

from rca.cli.common import fail
from rca.config import Settings

log = logging.getLogger("rca")


def multiprocess_metrics(settings: Settings, name: str) -> None:
    """Point prometheus-client's multiprocess mode at an emptied `RCA_DATA_DIR/<name>`, so that
    the children's counters reach the metrics port (the worker's, or any server process's). It must happen before
    prometheus-client is imported: it picks its value store at import time."""
    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus_client was imported before the worker set PROMETHEUS_MULTIPROC_DIR")
    directory = settings.data_dir / name
    try:
        if directory.exists():
            shutil.rmtree(directory)  # values of an earlier run: counters restart with the worker
        directory.mkdir(parents=True)
    except OSError as exc:
        fail(f"RCA_DATA_DIR: cannot prepare {directory} for the worker's metrics: {exc.strerror or exc}")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory.resolve())


_HELD_SLOTS: list[TextIO] = []  # the metrics slot's lock file, held open while the worker lives


def metrics_slot(settings: Settings) -> tuple[int, str]:
    """This worker's metrics port and multiprocess directory: the first of RCA_WORKER_METRICS_PORTS
    ports from RCA_WORKER_METRICS_PORT that no other worker of this host holds (a lock file in
    RCA_DATA_DIR, held while it lives) and nothing else listens on. Several workers on one host
    then serve on 9808, 9809, … and each empties only its own directory (the first keeps the
    plain `worker-metrics`)."""
    first, host = settings.worker_metrics_port, settings.worker_metrics_host
    ports = range(first, min(first + settings.worker_metrics_ports, 65536))
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"RCA_DATA_DIR: cannot create {settings.data_dir}: {exc.strerror or exc}")
    busy = []
    for port in ports:
        lock = (settings.data_dir / f"worker-metrics-{port}.lock").open("w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            busy.append(f"{port} (another rca worker)")
            continue
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the metrics server binds
            try:
                probe.bind((host, port))
            except OSError as exc:
                lock.close()
                busy.append(f"{port} ({exc.strerror or exc})")
                continue
        _HELD_SLOTS.append(lock)
        return port, "worker-metrics" if port == first else f"worker-metrics-{port}"
    fail(
        f"RCA_WORKER_METRICS_PORT: no free port on {host} among {first}-{ports[-1]}: {', '.join(busy)}"
        " (raise RCA_WORKER_METRICS_PORTS, or 0 turns the metrics port off)"
    )


def serve_worker_metrics(settings: Settings, port: int) -> None:
    """The worker's own metrics on RCA_WORKER_METRICS_HOST:`port`."""
    from prometheus_client import start_http_server

    from rca.metrics import scrape_registry

    try:
        start_http_server(port, settings.worker_metrics_host, registry=scrape_registry())
    except OSError as exc:
        fail(
            f"RCA_WORKER_METRICS_PORT: cannot listen on {settings.worker_metrics_host}:{port}:"
            f" {exc.strerror or exc} (0 turns the metrics port off)"
        )
    log.info("worker metrics on http://%s:%s/metrics", settings.worker_metrics_host, port)
