"""The one place an incident's status changes: resolved, or firing again.

"Resolve unless another alert still fires" is written here once. An Alertmanager group's incident
resolves with its group's resolve notice (Alertmanager says the whole group resolved). An early
warning's is joined by SLA alerts about its serving instance (rca.store.early_warnings), so it resolves only
once none of its alerts fires: neither the warning clearing nor the SLA alert resolving alone
closes it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from rca.domain.early_warning import ORIGIN
from rca.domain.status import AlertStatus
from rca.store.models import AlertRow, IncidentRow


def _still_firing(session: Session, incident: IncidentRow) -> bool:
    """Whether another alert of an incident that alerts join still fires (as this session has it)."""
    if incident.origin != ORIGIN:
        return False
    session.flush()
    found = session.scalar(
        select(AlertRow.id).where(AlertRow.incident_id == incident.id, AlertRow.status == AlertStatus.FIRING).limit(1)
    )
    return found is not None


def resolve(session: Session, incident: IncidentRow, at: datetime) -> bool:
    """Resolve the incident at `at`, unless it is resolved already or another alert still fires;
    True when it resolved now (Slack is then owed the resolve notice)."""
    if incident.status == AlertStatus.RESOLVED or _still_firing(session, incident):
        return False
    incident.status, incident.resolved_at = AlertStatus.RESOLVED, at
    return True


def fire(incident: IncidentRow) -> bool:
    """The incident fires (again); True when it was resolved."""
    changed = incident.status != AlertStatus.FIRING
    incident.status, incident.resolved_at = AlertStatus.FIRING, None
    return changed
