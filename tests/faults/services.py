"""The infrastructure the fault tests break: a PostgreSQL cluster and a Redis server of their own,
on free loopback ports, that a test may stop, kill and start again without touching the shared
ones other sessions use. Both are the real servers (`initdb`/`pg_ctl` of the installed
PostgreSQL, `redis-server`); when either is missing the tests fail saying so.

PostgreSQL refuses to run as root: as root, its commands run as the `postgres` user, in a
directory handed to it. Redis runs without persistence, so a restart after a kill is a Redis that
lost its queues, as a restarted cache node without a volume is.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from tests.e2e.promstack import free_port
from tests.helpers.waiting import wait_for

POSTGRES_USER = "postgres"  # the OS user PostgreSQL runs as when we are root, and its superuser


def _postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name))
    if not found:
        pytest.fail("the fault tests need PostgreSQL's server binaries (/usr/lib/postgresql/*/bin)", pytrace=False)
    return found[-1].parent


class PrivatePostgres:
    """A throwaway cluster in a temporary directory: `start`, `stop` (an immediate shutdown: a
    crash as clients see one), `start` again (crash recovery keeps what was committed)."""

    def __init__(self) -> None:
        self.bin = _postgres_bin()
        self.root = Path(tempfile.mkdtemp(prefix="rca-faults-pg-"))
        self.data, self.log = self.root / "data", self.root / "postgres.log"
        self.port = free_port()
        self._as_user: dict[str, Any] = {}
        if os.geteuid() == 0:
            self._as_user = {"user": POSTGRES_USER}
            shutil.chown(self.root, POSTGRES_USER)

    def _run(self, *command: str) -> None:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, **self._as_user)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise AssertionError(f"{' '.join(command)} failed: {done.stderr or done.stdout}\n{log}")

    def init(self) -> None:
        """initdb with trust auth on loopback only; fsync off (a test cluster, killed but never
        losing power)."""
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            POSTGRES_USER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "fsync": "off",
            "max_connections": "200",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{name} = {value}\n" for name, value in settings.items())

    def start(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self) -> None:
        """Immediate shutdown: connections drop, nothing is flushed, the next start recovers."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def create_database(self, name: str) -> str:
        """A new database in the cluster; its SQLAlchemy URL."""
        with psycopg.connect(self.dsn("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://{POSTGRES_USER}@127.0.0.1:{self.port}/{name}"

    def dsn(self, database: str) -> str:
        return f"postgresql://{POSTGRES_USER}@127.0.0.1:{self.port}/{database}"

    def destroy(self) -> None:
        if self.running():
            with suppress(AssertionError):
                self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateRedis:
    """A `redis-server` without persistence on a free port: `kill` (-9) and `start` again lose
    every queue, as a Redis restarted without a volume does."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("the fault tests need redis-server on PATH", pytrace=False)
        self.binary = binary
        self.root = Path(tempfile.mkdtemp(prefix="rca-faults-redis-"))
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        with (self.root / "redis.log").open("ab") as sink:
            self.process = subprocess.Popen([*command, "--dir", str(self.root)], stdout=sink, stderr=subprocess.STDOUT)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)

        def answers() -> bool:
            assert self.process is not None and self.process.poll() is None, "redis-server exited"
            with suppress(redis.RedisError):
                return bool(client.ping())
            return False

        try:
            wait_for(answers, 20, f"redis-server on port {self.port}", interval=0.05)
        finally:
            client.close()

    def kill(self) -> None:
        """kill -9: what it held in memory (the queues, the unacked messages) is gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def flush(self) -> None:
        client = redis.Redis.from_url(self.url)
        try:
            client.flushall()
        finally:
            client.close()

    def destroy(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)
