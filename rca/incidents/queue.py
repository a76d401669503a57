"""The one place an investigation is queued, with its one guard: not when the incident already has
one in the statuses the caller names (the newest such answers instead). The room records
"queued" in the caller's transaction; the caller hands the id to the broker after the commit
(rca.jobs.dispatch), and the sweep re-sends one whose enqueue was lost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rca.domain.status import InvestigationStatus
from rca.incidents.locks import lock_incident
from rca.store import bulk
from rca.store.models import Base, InvestigationRow

INVESTIGATIONS = Base.metadata.tables["investigations"]
# The guard's statuses, by caller. WAITING (new alerts): a queued one will see them; a running one
# may not have, so another is queued beside it. ACTIVE (someone asks to look again): one queued or
# running answers. ALWAYS (a warning again): a new episode of the scan is investigated on its own.
WAITING: tuple[str, ...] = (InvestigationStatus.QUEUED,)
ACTIVE: tuple[str, ...] = (InvestigationStatus.QUEUED, InvestigationStatus.RUNNING)
ALWAYS: tuple[str, ...] = ()
REQUESTED = "requested"  # the reason of an investigation someone asked for (API, page, CLI)


@dataclass(frozen=True)
class Requested:
    """What asking for an investigation of an incident got: a new one to enqueue (`created`), or the
    one already there that answers the request instead of another piling up."""

    investigation_id: int
    created: bool
    status: str
    requested_by: str | None


def _row(incident_id: int, reason: str) -> dict[str, Any]:
    """A queued investigation's columns (the others have their defaults: no attempts yet)."""
    return {"incident_id": incident_id, "status": InvestigationStatus.QUEUED, "reason": reason}


def queue_new(session: Session, incident_ids: Sequence[int], reason: str) -> list[int]:
    """Queue one investigation for each of these incidents, opened in this transaction (so none has
    one to guard against), in one INSERT: intake's hot path. Their ids, in order."""
    return bulk.insert_rows(session, INVESTIGATIONS, [_row(i, reason) for i in incident_ids])


def queue(
    session: Session, incident_id: int, reason: str, *, unless: Sequence[str], requested_by: str | None = None
) -> Requested:
    """Queue an investigation of the incident, unless it has one in the `unless` statuses already
    (the newest such answers). With a guard, the caller holds the incident's lock
    (`rca.incidents.locks`), so that two at once queue one: intake and `investigate_again` do."""
    waiting = (
        session.execute(
            select(InvestigationRow.id, InvestigationRow.status, InvestigationRow.requested_by)
            .where(InvestigationRow.incident_id == incident_id, InvestigationRow.status.in_(unless))
            .order_by(InvestigationRow.id.desc())
            .limit(1)
        ).first()
        if unless  # ALWAYS asks nothing
        else None
    )
    if waiting is not None:
        return Requested(waiting.id, False, waiting.status, waiting.requested_by)
    investigation = InvestigationRow(**_row(incident_id, reason), requested_by=requested_by, attempts=0)
    session.add(investigation)
    session.flush()
    return Requested(investigation.id, True, InvestigationStatus.QUEUED, requested_by)


def investigate_again(
    session: Session,
    incident_id: int,
    reason: str = REQUESTED,
    requested_by: str | None = None,
    *,
    unless: Sequence[str] = ACTIVE,
) -> Requested | None:
    """Queue a fresh investigation of the incident now, firing or resolved (an engineer fixed
    RCA_PROMETHEUS_URL after it resolved; `rca demo` runs again on its one incident), beside the
    earlier ones; unless one is queued or running already (`unless`), which answers instead. None
    when there is no such incident. The incident's row is locked first, so that two requests at
    once queue one."""
    if lock_incident(session, incident_id) is None:
        return None
    return queue(session, incident_id, reason, unless=unless, requested_by=requested_by)
