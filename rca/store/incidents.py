"""Read side of incidents: search with filters and fetch one with everything in it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import exists, func, select
from sqlalchemy.orm import Session, selectinload

from rca.store.models import Alert, Incident, Investigation, SlackDelivery


@dataclass(frozen=True)
class IncidentFilter:
    status: str | None = None
    alertname: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    since: datetime | None = None
    until: datetime | None = None


def search(session: Session, *, filters: IncidentFilter, limit: int, offset: int) -> tuple[list[Incident], int]:
    """Incidents matching every filter, newest first, with the total count."""
    query = select(Incident)
    if filters.status:
        query = query.where(Incident.status == filters.status)
    if filters.alertname:
        query = query.where(
            exists().where(Alert.incident_id == Incident.id, Alert.alertname == filters.alertname)
        )
    for name, value in filters.labels:
        query = query.where(
            exists().where(Alert.incident_id == Incident.id, Alert.labels[name].as_string() == value)
        )
    if filters.since:
        query = query.where(Incident.created_at >= filters.since)
    if filters.until:
        query = query.where(Incident.created_at < filters.until)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(
        query.options(selectinload(Incident.investigations).selectinload(Investigation.hypotheses))
        .order_by(Incident.created_at.desc(), Incident.id.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    return list(rows), total


def get(session: Session, *, incident_id: int) -> Incident | None:
    """One incident with its alerts and every investigation's findings and hypotheses."""
    return session.scalar(
        select(Incident)
        .where(Incident.id == incident_id)
        .options(
            selectinload(Incident.alerts),
            selectinload(Incident.investigations).selectinload(Investigation.findings),
            selectinload(Incident.investigations).selectinload(Investigation.hypotheses),
            selectinload(Incident.slack_delivery).selectinload(SlackDelivery.attempts),
        )
    )
