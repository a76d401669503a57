"""The process supervisor of `rca worker`: its children (a Celery consumer per queue, the
scheduler) start together, die with it, and stop together when one of them fails."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading

from rca.cli.common import EXIT_FAILED, EXIT_OK

log = logging.getLogger("rca")
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent_pid: int | None) -> None:
    """A child of `rca worker` or of the scheduler's parent: killed by the kernel when its parent
    dies (Linux' PR_SET_PDEATHSIG, as Celery does for its pool), so a crash leaves no orphan."""
    if parent_pid is None:
        return
    if sys.platform == "linux":  # elsewhere the scheduler still checks its parent each tick
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the line above
        raise SystemExit(EXIT_FAILED)


def supervise(children: dict[str, list[str]]) -> int:
    """Start the children, forward SIGTERM and SIGINT to them, and when one fails (a non-zero exit)
    stop the others: the whole worker then exits (non-zero) for its supervisor (compose, Kubernetes)
    to restart it whole. A child that shut down cleanly without being asked is started again: a
    Celery consumer does that when its broker goes away at the wrong moment (its connection's
    close fails with an AttributeError in kombu), and the rest of the worker is still sound.
    Returns the exit status."""
    stop = threading.Event()
    status = EXIT_OK

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    procs = {name: subprocess.Popen(command) for name, command in children.items()}
    log.info("worker: started %s", ", ".join(f"{name} (pid {p.pid})" for name, p in procs.items()))
    while not stop.is_set():
        for name, proc in list(procs.items()):
            if proc.poll() is None or stop.is_set():
                continue
            if proc.returncode == 0:
                log.warning("worker: %s shut down on its own; starting it again", name)
                procs[name] = subprocess.Popen(children[name])
                continue
            log.error("worker: %s exited with %s; stopping the others", name, proc.returncode)
            status = EXIT_FAILED
            stop.set()
        stop.wait(0.5)
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # Celery's warm shutdown: running tasks finish first
    for proc in procs.values():
        proc.wait()
    return status
