"""Finding the processes of an `rca worker` to kill, and waiting for what they were running."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from sqlalchemy import select

from rca.store.models import InvestigationRow
from tests.helpers.databases import rows
from tests.helpers.processes import alive, child_pids, descendants
from tests.helpers.waiting import wait_for


def investigations_pool(supervisor: int) -> list[int]:
    """The pool processes of the worker's investigations consumer (the ones running investigations)."""
    [consumer] = [
        pid for pid in child_pids(supervisor) if b"--queues=investigations" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ]
    return child_pids(consumer)


def kill_all(pids: list[int]) -> None:
    """kill -9 each at once, and wait until none is left."""
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not any(alive(pid) for pid in pids), 15, f"{pids} to die")


def family(supervisor: int) -> list[int]:
    return [supervisor, *descendants(supervisor)]


def running(db_url: str, incidents: list[int] | None = None) -> list[int]:
    """The ids of the investigations running now (of these incidents only, if given)."""
    query = select(InvestigationRow.id).where(InvestigationRow.status == "running")
    if incidents is not None:
        query = query.where(InvestigationRow.incident_id.in_(incidents))
    return [row.id for row in rows(db_url, query)]


def started(db_url: str, *, investigation_ids: list[int] | None = None, incident_ids: list[int] | None = None) -> list:
    """When the last run of each of these investigations (or those of these incidents) started."""
    query = select(InvestigationRow.started_at)
    if investigation_ids is not None:
        query = query.where(InvestigationRow.id.in_(investigation_ids))
    if incident_ids is not None:
        query = query.where(InvestigationRow.incident_id.in_(incident_ids))
    return [row.started_at for row in rows(db_url, query)]
