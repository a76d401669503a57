"""Benchmark: the fault suite (tests/faults/) at full size, with the service's default timings.

    .venv/bin/python bench/faults.py --webhooks 200
    .venv/bin/python bench/faults.py --webhooks 800 --faults redis,postgres --compressed

For each fault, a private PostgreSQL cluster and Redis (tests/faults/services.py), the real
`rca serve` and `rca worker` processes, a fake Slack and a stub Prometheus at loopback, and a
burst of `--webhooks` webhooks of new alert groups with the fault struck halfway:

- `child`: kill -9 of the worker's investigation pool processes (Celery starts new ones);
- `main`: kill -9 of the worker's main process (its children die with it), a new worker started;
- `all`: kill -9 of every process of the worker at once, a new worker started;
- `redis`: Redis killed for `--outage` seconds and started again empty (its queues lost);
- `postgres`: PostgreSQL stopped (immediately) for `--outage` seconds while investigations run;
  the refused webhooks are sent again, as Alertmanager does.

Prints one row per fault: webhooks accepted (2xx) and refused (re-sent until taken), accepted
alerts lost or never investigated, investigated more than once, finished investigations with no
or more than one Slack post, half-stored rows, the takeover (seconds from the kill until every
investigation running at the kill was finished; a second worker runs beside the killed one, as
a replica would) or the recovery (seconds from the restart until
everything accepted was investigated and posted), and the whole run's time. Without
`--compressed` the lease (30 s), sweep interval (15 s) and grace (60 s) are the defaults, so the
takeover is what a deployment sees.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import select  # noqa: E402

from rca.store.models import InvestigationRow  # noqa: E402
from tests.faults.ledger import Audit, Burst  # noqa: E402
from tests.faults.services import PrivatePostgres, PrivateRedis  # noqa: E402
from tests.faults.stack import COMPRESSED, FaultStack, fault_stack  # noqa: E402
from tests.faults.workers import family, investigations_pool, kill_all, running  # noqa: E402
from tests.helpers.databases import rows  # noqa: E402
from tests.helpers.waiting import wait_for  # noqa: E402

FAULTS = ("child", "main", "all", "redis", "postgres")


@dataclass
class Row:
    fault: str
    sent: int
    report: Audit
    refused: int
    seconds: float  # takeover or recovery
    total: float


def finished(db_url: str, ids: list[int]) -> bool:
    query = select(InvestigationRow.status).where(InvestigationRow.id.in_(ids))
    return all(r.status in ("done", "inconclusive", "failed") for r in rows(db_url, query))


def kill_fault(stack: FaultStack, fault: str, count: int, timeout: float) -> tuple[Burst, float, Audit]:
    """Half the burst, the kill, the other half; seconds until what ran at the kill was finished,
    and the audit. For `main` and `all` a second worker runs from the start, as a second replica
    (or the restarted container) would: the takeover measures the lease and the sweep, not how
    long a worker takes to start."""
    with ExitStack() as workers:
        victim = workers.enter_context(stack.worker(f"bench-{fault}"))
        if fault != "child":
            workers.enter_context(stack.worker(f"bench-{fault}-replica"))
        burst = stack.send(f"{fault}-a", count // 2)
        at_kill = wait_for(lambda: running(stack.db_url), 60, "investigations to run", interval=0.05)
        victims = {
            "child": lambda: investigations_pool(victim.process.pid),
            "main": lambda: [victim.process.pid],
            "all": lambda: family(victim.process.pid),
        }[fault]()
        kill_all(victims)
        killed = time.monotonic()
        burst.merge(stack.send(f"{fault}-b", count - count // 2))
        wait_for(lambda: finished(stack.db_url, at_kill), timeout, "the takeover", interval=0.2)
        took = time.monotonic() - killed
        return burst, took, stack.wait(burst, timeout)


def outage_fault(
    stack: FaultStack, fault: str, count: int, outage: float, down: Callable[[], None], up: Callable[[], None]
) -> tuple[Burst, float]:
    """The server down from a third of the burst to two thirds (at least `outage` seconds)."""
    downed = 0.0

    def strike(n: int) -> None:
        nonlocal downed
        if n == count // 3:
            down()
            downed = time.monotonic()
        elif n == 2 * count // 3:
            time.sleep(max(0.0, downed + outage - time.monotonic()))
            up()

    burst = stack.send(fault, count, before=strike)
    return burst, time.monotonic()


def run(stack: FaultStack, fault: str, count: int, outage: float, timeout: float) -> Row:
    stack.reset()
    started = time.monotonic()
    if fault in ("child", "main", "all"):
        burst, seconds, report = kill_fault(stack, fault, count, timeout)
        return Row(fault, count, report, 0, seconds, time.monotonic() - started)
    with stack.worker(f"bench-{fault}"):
        if fault == "redis":
            burst, restored = outage_fault(stack, fault, count, outage, stack.redis.kill, stack.redis.start)
        else:
            burst, restored = outage_fault(stack, fault, count, outage, stack.postgres.stop, stack.postgres.start)
        refused = len(burst.refused)
        stack.resend_refused(burst, attempts=60)
        report = stack.wait(burst, timeout)
    return Row(fault, count, report, refused, time.monotonic() - restored, time.monotonic() - started)


def print_table(table: list[Row]) -> None:
    head = (
        f"{'fault':<9}{'sent':>6}{'accepted':>10}{'refused':>9}{'lost':>6}{'uninvestigated':>16}{'twice':>7}"
        f"{'failed':>8}{'missing posts':>15}{'duplicate posts':>17}{'half-stored':>13}{'takeover/recovery s':>21}"
        f"{'run s':>8}"
    )
    print(head)
    for r in table:
        a = r.report
        half = sum(len(v) for v in a.half_stored.values())
        print(
            f"{r.fault:<9}{r.sent:>6}{a.accepted:>10}{r.refused:>9}{len(a.lost):>6}{len(a.unfinished):>16}"
            f"{len(a.investigated_twice):>7}{len(a.failed):>8}{len(a.missing_posts):>15}{len(a.duplicate_posts):>17}"
            f"{half:>13}{r.seconds:>21.1f}{r.total:>8.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--webhooks", type=int, default=200, help="webhooks per fault")
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    parser.add_argument("--outage", type=float, default=10.0, help="seconds Redis or PostgreSQL stays down, at least")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for a fault's alerts")
    parser.add_argument("--compressed", action="store_true", help="the test suite's short lease and sweep")
    args = parser.parse_args()
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    if unknown := set(faults) - set(FAULTS):
        raise SystemExit(f"unknown faults: {sorted(unknown)}")
    logging.basicConfig(level=logging.WARNING)
    home = Path(tempfile.mkdtemp(prefix="rca-bench-faults-"))
    postgres, redis = PrivatePostgres(), PrivateRedis()
    print(f"load average at start: {os.getloadavg()}; logs in {home}", flush=True)
    table: list[Row] = []
    try:
        postgres.init()
        postgres.start()
        redis.start()
        with fault_stack(home, postgres, redis) as stack:
            if not args.compressed:
                stack.settings = {k: v for k, v in stack.settings.items() if k not in COMPRESSED}
            for fault in faults:
                table.append(run(stack, fault, args.webhooks, args.outage, args.timeout))
                print_table(table[-1:])
                sys.stdout.flush()
    finally:
        postgres.destroy()
        redis.destroy()
    print(f"\nload average at end: {os.getloadavg()}")
    print_table(table)


if __name__ == "__main__":
    main()
