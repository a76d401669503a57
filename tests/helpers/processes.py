"""Child processes the tests start (`rca worker`, `rca serve`): a clean environment, a running
worker yielded once it answers a ping, and stopping each by its pid."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from celery import Celery

from tests.helpers.paths import VENV_BIN
from tests.helpers.waiting import wait_for


def subprocess_env(**rca: str) -> dict[str, str]:
    """A clean environment for a child process: no inherited RCA_* settings, only the given ones."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RCA_")}
    env.update({f"RCA_{k.upper()}": v for k, v in rca.items()})
    return env


def stop_process(proc: subprocess.Popen[Any], timeout: float = 15) -> None:
    """Terminate one process we started, by its pid; kill it if it does not go."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


@dataclass
class Worker:
    """A running `rca worker` child process and a Celery client of its broker (to send it tasks)."""

    process: subprocess.Popen[bytes]
    app: Celery
    log: Path
    broker: str

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def wait_until_serving(base: str, proc: subprocess.Popen[Any], timeout: float = 60) -> None:
    """Until `rca serve` at `base` answers /healthz; SystemExit if it exits or does not come up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"rca serve exited with {proc.returncode}")
        with suppress(httpx.HTTPError):
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"rca serve did not come up within {timeout:g} s")


def child_pids(pid: int) -> list[int]:
    """The pids of a process's children (Linux /proc)."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with suppress(OSError):
            children += [int(child) for child in (task / "children").read_text().split()]
    return children


def descendants(pid: int) -> list[int]:
    """Every process below `pid`: children, theirs, and so on."""
    found = child_pids(pid)
    return found + [d for child in found for d in descendants(child)]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for its parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@contextmanager
def running_worker(
    home: Path,
    env: dict[str, str],
    app: Celery,
    broker: str,
    name: str,
    options: tuple[str, ...] = ("--no-beat", "--concurrency", "1"),
    log_name: str = "worker.log",
    ready_timeout: float = 45,
) -> Iterator[Worker]:
    """`rca worker --no-beat --concurrency 1` (or with `options`) in `home`, yielded once it answers
    a ping, stopped by its pid afterwards; its output goes to `home/worker.log` for failure
    messages. Its metrics port is off unless `env` sets RCA_WORKER_METRICS_PORT. `ready_timeout`:
    how long its start may take (its pools' imports, on a loaded machine)."""
    log = home / log_name
    hostname = f"{name}-{uuid.uuid4().hex[:8]}@127.0.0.1"
    env = {"RCA_WORKER_METRICS_PORT": "0", **env}  # parallel sessions would fight over 9808; tests that want it set it
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(VENV_BIN / "rca"), "worker", *options, "--hostname", hostname],
            cwd=home,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    worker = Worker(process, app, log, broker)
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"rca worker exited with {process.returncode}:\n{worker.output()}")
            try:
                return bool(app.control.ping(destination=[hostname], timeout=0.5))
            except app.connection().connection_errors:
                return False  # a pooled connection to a broker that restarted fails once; the next is new

        wait_for(ready, ready_timeout, "the Celery worker to answer a ping", interval=0.2)
        yield worker
    finally:
        stop_process(process)
        app.close()
