"""Turn one accepted webhook into incident state, inside the caller's transaction.

One incident per alert group while it is open (keyed on Alertmanager's groupKey). Re-sent alerts,
new alerts of the group and resolve notices update it; only a new incident or a newly firing
alert asks for a fresh investigation, so an alert storm costs one investigation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rca.domain.clock import utcnow
from rca.domain.status import AlertStatus, InvestigationStatus
from rca.intake.schema import WebhookAlert, WebhookPayload
from rca.store import digests
from rca.store.models import Alert, Incident, Investigation, Notification

ACTIVE_INVESTIGATION = (InvestigationStatus.QUEUED, InvestigationStatus.RUNNING)


@dataclass(frozen=True)
class IntakeResult:
    incident_id: int
    created: bool
    investigation_id: int | None  # set when an investigation must be enqueued after commit
    resolved_now: bool = False  # this notification resolved the incident: tell Slack after commit


def _open_incident(session: Session, group_key: str) -> Incident | None:
    return session.scalar(
        select(Incident).where(Incident.group_key == group_key, Incident.status == AlertStatus.FIRING).with_for_update()
    )


def _latest_incident(session: Session, group_key: str) -> Incident | None:
    return session.scalar(select(Incident).where(Incident.group_key == group_key).order_by(Incident.id.desc()).limit(1))


def _upsert_alert(session: Session, incident: Incident, alert: WebhookAlert, raw: dict[str, Any]) -> bool:
    """Insert or refresh one alert; True when it is newly firing in this incident."""
    now = utcnow()
    row = session.scalar(select(Alert).where(Alert.incident_id == incident.id, Alert.fingerprint == alert.fingerprint))
    if row is None:
        session.add(
            Alert(
                incident_id=incident.id,
                fingerprint=alert.fingerprint,
                alertname=alert.alertname,
                status=alert.status,
                labels=alert.labels,
                annotations=alert.annotations,
                starts_at=alert.startsAt,
                ends_at=alert.endsAt,
                generator_url=alert.generatorURL or None,
                raw=raw,
                first_seen_at=now,
                last_seen_at=now,
            )
        )
        return alert.status == AlertStatus.FIRING
    newly_firing = row.status == AlertStatus.RESOLVED and alert.status == AlertStatus.FIRING
    row.status = alert.status
    row.annotations = alert.annotations
    row.starts_at = alert.startsAt
    row.ends_at = alert.endsAt
    row.generator_url = alert.generatorURL or None
    row.raw = raw
    row.last_seen_at = now
    return newly_firing


def _new_incident(session: Session, payload: WebhookPayload) -> Incident:
    incident = Incident(
        group_key=payload.groupKey,
        status=payload.status,
        title=payload.title(),
        alertname=payload.groupLabels.get("alertname")
        or payload.commonLabels.get("alertname")
        or payload.alerts[0].alertname,
        receiver=payload.receiver,
        group_labels=payload.groupLabels,
        common_labels=payload.commonLabels,
        common_annotations=payload.commonAnnotations,
        external_url=payload.externalURL or None,
        notification_count=0,
        resolved_at=utcnow() if payload.status == AlertStatus.RESOLVED else None,
    )
    session.add(incident)
    session.flush()
    return incident


def record_notification(session: Session, payload: WebhookPayload, raw: dict[str, Any]) -> IntakeResult:
    """Store the notification and its alerts; decide whether a new investigation is needed."""
    incident = _open_incident(session, payload.groupKey)
    if incident is None and payload.status == AlertStatus.RESOLVED:
        # A resolve notice for a group we already closed (or never saw firing).
        incident = _latest_incident(session, payload.groupKey)
    created = incident is None
    if incident is None:
        incident = _new_incident(session, payload)

    session.add(Notification(incident_id=incident.id, status=payload.status, payload=raw))
    newly_firing = [
        _upsert_alert(session, incident, alert, raw_alert)
        for alert, raw_alert in zip(payload.alerts, raw["alerts"], strict=True)
    ]

    now = utcnow()
    incident.notification_count += 1
    incident.updated_at = now
    incident.common_labels = payload.commonLabels
    incident.common_annotations = payload.commonAnnotations
    resolved_now = payload.status == AlertStatus.RESOLVED and incident.status != AlertStatus.RESOLVED
    if resolved_now:
        incident.status = AlertStatus.RESOLVED
        incident.resolved_at = now

    investigation_id = None
    if incident.status == AlertStatus.FIRING and (created or any(newly_firing)):
        session.flush()
        investigation_id = _request_investigation(session, incident, reason="new_incident" if created else "new_alerts")
    digests.refresh(session, incident.id)
    return IntakeResult(
        incident_id=incident.id, created=created, investigation_id=investigation_id, resolved_now=resolved_now
    )


def _request_investigation(session: Session, incident: Incident, reason: str) -> int | None:
    """Queue an investigation unless one is already waiting to run (it will see the new alerts)."""
    pending = session.scalar(
        select(Investigation.id).where(
            Investigation.incident_id == incident.id, Investigation.status == InvestigationStatus.QUEUED
        )
    )
    if pending is not None:
        return None
    investigation = Investigation(incident_id=incident.id, status=InvestigationStatus.QUEUED, reason=reason, attempts=0)
    session.add(investigation)
    session.flush()
    return investigation.id
