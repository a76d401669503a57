"""Fixtures of the fault tests: a PostgreSQL cluster and a Redis server of their own (started once
for the package, and started again for the next test if one was left stopped), `rca serve` on
them with a fake Slack and a stub Prometheus (tests/faults/stack.py), reset for every test, and
one `rca worker` that the tests which do not kill it share (a worker takes long to start)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from tests.faults.services import PrivatePostgres, PrivateRedis
from tests.faults.stack import FaultStack, fault_stack
from tests.helpers.processes import Worker


@pytest.fixture(scope="package")
def private_postgres() -> Iterator[PrivatePostgres]:
    postgres = PrivatePostgres()
    try:
        postgres.init()
        postgres.start()
        yield postgres
    finally:
        postgres.destroy()


@pytest.fixture(scope="package")
def private_redis() -> Iterator[PrivateRedis]:
    redis = PrivateRedis()
    try:
        redis.start()
        yield redis
    finally:
        redis.destroy()


@pytest.fixture(scope="package")
def started_stack(
    tmp_path_factory: pytest.TempPathFactory, private_postgres: PrivatePostgres, private_redis: PrivateRedis
) -> Iterator[FaultStack]:
    with fault_stack(tmp_path_factory.mktemp("faults"), private_postgres, private_redis) as stack:
        yield stack


@pytest.fixture
def stack(started_stack: FaultStack) -> FaultStack:
    """The stack with both servers up and everything emptied, whatever the last test left."""
    if not started_stack.postgres.running():
        started_stack.postgres.start()
    if started_stack.redis.process is None or started_stack.redis.process.poll() is not None:
        started_stack.redis.start()
    started_stack.reset()
    return started_stack


class SharedWorker:
    """One `rca worker` for the tests that do not kill it, started when first asked for; stopped
    for the tests that run (and kill) workers of their own, so that no other worker takes over."""

    def __init__(self, stack: FaultStack) -> None:
        self.stack = stack
        self._running: ExitStack | None = None
        self._worker: Worker | None = None

    def get(self) -> Worker:
        if self._worker is not None and self._worker.process.poll() is not None:
            self.stop()  # a test killed it after all: a fresh one
        if self._worker is None:
            self._running = ExitStack()
            self._worker = self._running.enter_context(self.stack.worker("rca-shared"))
        return self._worker

    def stop(self) -> None:
        if self._running is not None:
            self._running.close()
        self._running, self._worker = None, None


@pytest.fixture(scope="package")
def shared_worker(started_stack: FaultStack) -> Iterator[SharedWorker]:
    shared = SharedWorker(started_stack)
    try:
        yield shared
    finally:
        shared.stop()


@pytest.fixture
def worker(stack: FaultStack, shared_worker: SharedWorker) -> Worker:
    """The shared `rca worker`, running."""
    return shared_worker.get()


@pytest.fixture
def own_workers(stack: FaultStack, shared_worker: SharedWorker) -> FaultStack:
    """The stack with no shared worker running: the test starts (and kills) its own."""
    shared_worker.stop()
    return stack
