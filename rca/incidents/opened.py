"""The one place an incident is opened: an Alertmanager group's (intake, many at once) and an early
warning's (the scan and the backtest, one at a time) go through `open_incidents`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert
from sqlalchemy.orm import Session

from rca.incidents.search import index_new
from rca.store import bulk
from rca.store.models import AlertRow, Base, IncidentRow

INCIDENTS, ALERTS = (Base.metadata.tables[name] for name in ("incidents", "alerts"))
# Built once: one built per webhook cost more Python than its round trip to the database.
NEW_ALERTS = insert(ALERTS)


def open_incidents(
    session: Session, incidents: Sequence[dict[str, Any]], alerts: Sequence[Sequence[dict[str, Any]]]
) -> list[int]:
    """Open these incidents (their columns) with their first alerts (the columns of each incident's
    alerts, which gain its `incident_id`) and their search digests; their ids, in order. Each table
    gets one INSERT for all of them, without the unit of work's bookkeeping (the profile of
    bench/intake_throughput.py put most of a new group's CPU there); nothing is read back but ids."""
    ids = bulk.insert_rows(session, INCIDENTS, incidents)
    for incident_id, rows in zip(ids, alerts, strict=True):
        for row in rows:
            row["incident_id"] = incident_id
    session.execute(NEW_ALERTS, [row for rows in alerts for row in rows])
    index_new(
        session,
        [
            (IncidentRow(id=i, **columns), [AlertRow(**row) for row in rows])  # outside the session
            for i, columns, rows in zip(ids, incidents, alerts, strict=True)
        ],
    )
    return ids
