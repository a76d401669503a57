"""Which early-warning incident an Alertmanager notification joins (rca/scan opens them).

When the SLA alert fires for a target the scan already warned about, its alerts join the
warning's incident instead of opening a second one: the warning's investigation is already there,
and the alert's arrival shows how far ahead the warning was. Alerts already joined keep going
there (a repeat, a resolve), by fingerprint.
"""

from __future__ import annotations

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from rca.domain.early_warning import ORIGIN
from rca.store.models import Alert, Incident, ScanTarget, ScanTransition

WARNING = "warning"  # rca.scan.states.ScanState.WARNING


def joined_incident(
    session: Session, instances: list[str], hosts: list[str], fingerprints: list[str]
) -> Incident | None:
    """The early-warning incident holding one of these alert fingerprints, else the open warning
    of a target these alerts name (its exact `instance` first, else its host)."""
    holding = session.scalar(
        select(Incident)
        .join(Alert, Alert.incident_id == Incident.id)
        .where(Incident.origin == ORIGIN, Alert.fingerprint.in_(fingerprints))
        .order_by(Incident.id.desc())
        .limit(1)
    )
    if holding is not None or not (instances or hosts):
        return holding
    warned = session.scalars(
        select(ScanTarget).where(
            ScanTarget.state == WARNING,
            ScanTarget.incident_id.is_not(None),
            or_(ScanTarget.instance.in_(instances), ScanTarget.host.in_(hosts)),
        )
    ).all()
    exact = [row for row in warned if row.instance in instances]
    chosen = (exact or sorted(warned, key=lambda row: row.instance))[:1]
    return session.get(Incident, chosen[0].incident_id, with_for_update=True) if chosen else None


def transitions(session: Session, incident_id: int) -> list[ScanTransition]:
    """The scan's changes of state that concern this incident, oldest first: why it warned (the
    reason, and the figures of each signal then), cleared and warned again."""
    return list(
        session.scalars(
            select(ScanTransition).where(ScanTransition.incident_id == incident_id).order_by(ScanTransition.id)
        )
    )
