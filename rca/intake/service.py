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

from rca.collect.target import host_from_label
from rca.config import TargetConfig
from rca.domain.clock import utcnow
from rca.domain.status import AlertStatus, InvestigationStatus
from rca.intake.schema import WebhookAlert, WebhookPayload
from rca.store import digests, early_warnings, notices
from rca.store.models import Alert, Incident, Investigation, Notification

ACTIVE_INVESTIGATION = (InvestigationStatus.QUEUED, InvestigationStatus.RUNNING)
BATCH = 500  # fingerprints per SELECT: well under any backend's limit on bound parameters


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


def _existing_alerts(session: Session, incident: Incident, fingerprints: list[str]) -> dict[str, Alert]:
    """The incident's alerts with these fingerprints, in one SELECT per `BATCH` fingerprints rather
    than one per alert (a storm's notification carries up to RCA_WEBHOOK_MAX_ALERTS of them)."""
    unique = list(dict.fromkeys(fingerprints))
    found: dict[str, Alert] = {}
    for start in range(0, len(unique), BATCH):
        chunk = unique[start : start + BATCH]
        query = select(Alert).where(Alert.incident_id == incident.id, Alert.fingerprint.in_(chunk))
        found.update((row.fingerprint, row) for row in session.scalars(query))
    return found


def _upsert_alerts(
    session: Session, incident: Incident, alerts: list[WebhookAlert], raw_alerts: list[dict[str, Any]]
) -> bool:
    """Insert or refresh the notification's alerts; True when any is newly firing in this incident.
    A fingerprint repeated within one notification is one alert: the later copy wins."""
    now = utcnow()
    rows = _existing_alerts(session, incident, [alert.fingerprint for alert in alerts])
    newly_firing = False
    for alert, raw in zip(alerts, raw_alerts, strict=True):
        row = rows.get(alert.fingerprint)
        if row is None:
            row = rows[alert.fingerprint] = Alert(
                incident_id=incident.id,
                fingerprint=alert.fingerprint,
                alertname=alert.alertname,
                status=alert.status,
                labels=alert.labels,
                first_seen_at=now,
            )
            session.add(row)
            newly_firing |= alert.status == AlertStatus.FIRING
        else:
            newly_firing |= row.status == AlertStatus.RESOLVED and alert.status == AlertStatus.FIRING
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


def record_notification(
    session: Session, payload: WebhookPayload, raw: dict[str, Any], *, owe_slack: bool = False
) -> IntakeResult:
    """Store the notification and its alerts; decide whether a new investigation is needed. With
    `owe_slack` (Slack is configured), a resolve notice is owed to Slack in this transaction, so
    that the sweeper delivers it if its enqueue after the commit is lost."""
    incident = _open_incident(session, payload.groupKey) or _early_warning_of(session, payload)
    if incident is None and payload.status == AlertStatus.RESOLVED:
        # A resolve notice for a group we already closed (or never saw firing).
        incident = _latest_incident(session, payload.groupKey)
    created = incident is None
    if incident is None:
        incident = _new_incident(session, payload)

    session.add(Notification(incident_id=incident.id, status=payload.status, payload=raw))
    newly_firing = _upsert_alerts(session, incident, payload.alerts, raw["alerts"])

    now = utcnow()
    incident.notification_count += 1
    incident.updated_at = now
    joined = incident.origin == early_warnings.ORIGIN  # the scan's incident keeps its own labels and text
    if not joined:
        incident.common_labels = payload.commonLabels
        incident.common_annotations = payload.commonAnnotations
    resolved_now = payload.status == AlertStatus.RESOLVED and incident.status != AlertStatus.RESOLVED
    if resolved_now and joined:  # resolved once the warning has cleared too
        session.flush()
        resolved_now = not session.scalar(
            select(Alert.id).where(Alert.incident_id == incident.id, Alert.status == AlertStatus.FIRING).limit(1)
        )
    if resolved_now:
        incident.status = AlertStatus.RESOLVED
        incident.resolved_at = now
        if owe_slack:
            session.flush()  # the incident's own changes first: `owe` updates its row directly
            notices.owe(session, incident.id)

    investigation_id = None
    if incident.status == AlertStatus.FIRING and (created or newly_firing):
        session.flush()
        investigation_id = _request_investigation(session, incident, reason="new_incident" if created else "new_alerts")
    digests.refresh(session, incident.id)
    return IntakeResult(
        incident_id=incident.id, created=created, investigation_id=investigation_id, resolved_now=resolved_now
    )


def _early_warning_of(session: Session, payload: WebhookPayload) -> Incident | None:
    """The scan's early-warning incident these alerts join (rca/store/early_warnings.py)."""
    instances = sorted({a.labels["instance"] for a in payload.alerts if a.labels.get("instance")})
    names = TargetConfig().host_labels
    hosts = sorted({host_from_label(a.labels[n]) for a in payload.alerts for n in names if a.labels.get(n)})
    fingerprints = [a.fingerprint for a in payload.alerts]
    return early_warnings.joined_incident(session, instances, hosts, fingerprints)


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
