"""kill -9 of `rca worker` mid-investigation, in its three shapes: the pool processes running the
investigations (Celery starts new ones), the worker's main process (its children die with it), and
every one of its processes at once. A new worker takes over; every accepted alert is investigated
once and posted to Slack once, nothing is half-stored, and the takeover is bounded (a minute).

The lease and sweep are compressed (tests/faults/stack.py), so a takeover here takes seconds."""

from __future__ import annotations

import time

from tests.faults.ledger import Burst
from tests.faults.stack import FaultStack
from tests.faults.workers import family, investigations_pool, kill_all, running, started
from tests.helpers.processes import Worker, alive
from tests.helpers.waiting import wait_for

TAKEOVER_BOUND = 60.0  # seconds, the bound on a crashed investigation's takeover
BURST, BACKLOG = 6, 12


def test_killed_pool_processes_cost_nothing_and_their_runs_go_before_the_backlog(
    stack: FaultStack, worker: Worker
) -> None:
    """The runs of the killed pool are taken over once their lease lapses, ahead of the backlog of
    new alerts that arrived meanwhile (the sweep re-queues at a higher priority): they do not
    wait for the whole backlog."""
    stack.prometheus.delay = 0.3  # every query takes a while: the investigations are mid-run when killed
    burst = stack.send("child", BURST)
    assert not burst.refused, burst.refused
    victims = wait_for(lambda: running(stack.db_url, list(burst.accepted.values())), 30, "investigations to run")
    kill_all(investigations_pool(worker.process.pid))
    killed = time.monotonic()
    backlog = stack.send("backlog", BACKLOG)
    burst.merge(backlog)
    report = stack.settle(burst, TAKEOVER_BOUND, f"the work of the killed pool\n{worker.output()}")
    took = time.monotonic() - killed
    assert report.clean, report.problems()
    assert took < TAKEOVER_BOUND
    last_takeover = max(started(stack.db_url, investigation_ids=victims))
    assert any(at > last_takeover for at in started(stack.db_url, incident_ids=list(backlog.accepted.values())))


def test_a_killed_worker_main_process_then_all_its_processes_cost_nothing(own_workers: FaultStack) -> None:
    """First kill -9 of the main process (its consumers, pools and scheduler die with it), then of
    every process of the next worker at once; each time the next worker takes over in bounded time."""
    stack = own_workers
    stack.prometheus.delay = 0.3
    burst, took = Burst(), []
    with stack.worker("rca-main") as first:
        main = stack.send("main", BURST)
        wait_for(lambda: running(stack.db_url, list(main.accepted.values())), 30, "investigations to run")
        members = family(first.process.pid)
        kill_all([first.process.pid])
        killed = time.monotonic()
        wait_for(lambda: not any(alive(pid) for pid in members), 10, "the killed worker's children to die with it")
    burst.merge(main)
    with stack.worker("rca-all") as second:
        stack.settle(main, TAKEOVER_BOUND, f"the killed main process' work\n{second.output()}")
        took.append(time.monotonic() - killed)
        every = stack.send("all", BURST)
        wait_for(lambda: running(stack.db_url, list(every.accepted.values())), 30, "investigations to run")
        kill_all(family(second.process.pid))
        killed = time.monotonic()
    burst.merge(every)
    stack.prometheus.delay = 0.05
    with stack.worker("rca-after") as third:
        report = stack.settle(burst, TAKEOVER_BOUND, f"the work of the killed processes\n{third.output()}")
        took.append(time.monotonic() - killed)
    assert not burst.refused, burst.refused
    assert report.clean, report.problems()
    assert max(took) < TAKEOVER_BOUND, took
