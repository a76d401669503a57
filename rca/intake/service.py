"""Turn one accepted webhook into incident state, inside the caller's transaction.

One incident per alert group while it is open (keyed on Alertmanager's groupKey). Re-sent alerts,
new alerts of the group and resolve notices update it; only a new incident or a newly firing
alert asks for a fresh investigation, so an alert storm costs one investigation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from rca.collect.target import host_from_label
from rca.config import TargetConfig
from rca.domain.clock import utcnow
from rca.domain.status import AlertStatus, InvestigationStatus
from rca.intake.schema import WebhookAlert, WebhookPayload
from rca.store import digests, early_warnings, notices
from rca.store.models import Alert, Base, Incident, Investigation, Notification

ACTIVE_INVESTIGATION = (InvestigationStatus.QUEUED, InvestigationStatus.RUNNING)
# The tables a new group's rows go into with plain INSERTs (SQLAlchemy Core: no ORM bookkeeping).
INCIDENTS, NOTIFICATIONS, ALERTS, INVESTIGATIONS = (
    Base.metadata.tables[name] for name in ("incidents", "notifications", "alerts", "investigations")
)
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


def _alert_values(alert: WebhookAlert, raw: dict[str, Any], now: datetime) -> dict[str, Any]:
    """What every notification of an alert sets on its row."""
    return {
        "status": alert.status,
        "annotations": alert.annotations,
        "starts_at": alert.startsAt,
        "ends_at": alert.endsAt,
        "generator_url": alert.generatorURL or None,
        "raw": raw,
        "last_seen_at": now,
    }


def _latest_copies(
    alerts: list[WebhookAlert], raw_alerts: list[dict[str, Any]]
) -> dict[str, tuple[WebhookAlert, dict[str, Any]]]:
    """The notification's alerts by fingerprint: a fingerprint repeated within one notification is
    one alert, and the later copy wins."""
    return {alert.fingerprint: (alert, raw) for alert, raw in zip(alerts, raw_alerts, strict=True)}


def _new_alert(incident_id: int, alert: WebhookAlert, raw: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The columns of an alert first seen now."""
    return {
        "incident_id": incident_id,
        "fingerprint": alert.fingerprint,
        "alertname": alert.alertname,
        "labels": alert.labels,
        "first_seen_at": now,
        **_alert_values(alert, raw, now),
    }


def _upsert_alerts(
    session: Session, incident: Incident, alerts: list[WebhookAlert], raw_alerts: list[dict[str, Any]], now: datetime
) -> tuple[bool, bool]:
    """Insert or refresh the alerts of a known incident. Returns whether any is newly firing in
    this incident, and whether its searchable text changed (a new alert, or new annotations)."""
    latest = _latest_copies(alerts, raw_alerts)
    rows = _existing_alerts(session, incident, list(latest))
    newly_firing = text_changed = False
    for fingerprint, (alert, raw) in latest.items():
        row = rows.get(fingerprint)
        if row is None:
            session.add(Alert(**_new_alert(incident.id, alert, raw, now)))
            newly_firing |= alert.status == AlertStatus.FIRING
            text_changed = True
            continue
        newly_firing |= row.status == AlertStatus.RESOLVED and alert.status == AlertStatus.FIRING
        text_changed |= row.annotations != alert.annotations
        for name, value in _alert_values(alert, raw, now).items():
            setattr(row, name, value)
    return newly_firing, text_changed


def _record_new_group(session: Session, payload: WebhookPayload, raw: dict[str, Any]) -> IntakeResult:
    """A group with no incident to join: the incident, its notification and alerts, an
    investigation when it fires, and its search digest. Each is one INSERT of rows in hand, without
    the unit of work's bookkeeping (the profile of bench/intake_throughput.py put most of a new
    group's CPU there); nothing is read back."""
    now = utcnow()
    columns = {
        "group_key": payload.groupKey,
        "status": payload.status,
        "title": payload.title(),
        "alertname": payload.groupLabels.get("alertname")
        or payload.commonLabels.get("alertname")
        or payload.alerts[0].alertname,
        "receiver": payload.receiver,
        "group_labels": payload.groupLabels,
        "common_labels": payload.commonLabels,
        "common_annotations": payload.commonAnnotations,
        "external_url": payload.externalURL or None,
        "origin": "alertmanager",
        "notification_count": 1,
        "created_at": now,
        "updated_at": now,
        "resolved_at": now if payload.status == AlertStatus.RESOLVED else None,
    }
    incident_id = session.execute(insert(INCIDENTS).values(columns).returning(INCIDENTS.c.id)).scalar_one()
    incident = Incident(id=incident_id, **columns)  # kept out of the session: only the digest reads it
    session.execute(
        insert(NOTIFICATIONS).values(incident_id=incident.id, status=payload.status, payload=raw, received_at=now)
    )
    copies = _latest_copies(payload.alerts, raw["alerts"]).values()
    alerts = [_new_alert(incident.id, alert, copy, now) for alert, copy in copies]
    session.execute(insert(ALERTS), alerts)
    investigation_id = None
    if incident.status == AlertStatus.FIRING:
        queued = {"incident_id": incident.id, "status": InvestigationStatus.QUEUED, "reason": "new_incident"}
        investigation_id = session.execute(
            insert(INVESTIGATIONS).values(queued).returning(INVESTIGATIONS.c.id)
        ).scalar_one()
    digests.write_new(session, incident, [Alert(**alert) for alert in alerts])  # out of the session too
    return IntakeResult(incident.id, created=True, investigation_id=investigation_id)


def record_notification(
    session: Session,
    payload: WebhookPayload,
    raw: dict[str, Any],
    *,
    owe_slack: bool = False,
    target: TargetConfig | None = None,
) -> IntakeResult:
    """Store the notification and its alerts; decide whether a new investigation is needed. With
    `owe_slack` (Slack is configured), a resolve notice is owed to Slack in this transaction, so
    that the sweeper delivers it if its enqueue after the commit is lost. `target`: the config
    file's host labels, by which an alert joins the scan's warning for its host."""
    incident = _open_incident(session, payload.groupKey) or _early_warning_of(
        session, payload, target or TargetConfig()
    )
    if incident is None and payload.status == AlertStatus.RESOLVED:
        # A resolve notice for a group we already closed (or never saw firing).
        incident = _latest_incident(session, payload.groupKey)
    if incident is None:
        return _record_new_group(session, payload, raw)

    now = utcnow()
    session.add(Notification(incident_id=incident.id, status=payload.status, payload=raw, received_at=now))
    newly_firing, text_changed = _upsert_alerts(session, incident, payload.alerts, raw["alerts"], now)
    joined = incident.origin == early_warnings.ORIGIN  # the scan's incident keeps its own labels and text
    common = (payload.commonLabels, payload.commonAnnotations)
    if not joined:
        text_changed |= (incident.common_labels, incident.common_annotations) != common
        incident.common_labels, incident.common_annotations = common
    incident.notification_count += 1
    incident.updated_at = now
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
    if incident.status == AlertStatus.FIRING and newly_firing:
        session.flush()
        investigation_id = _request_investigation(session, incident, reason="new_alerts")
    if text_changed or resolved_now:  # a plain re-send changes nothing the digest is built from
        digests.refresh(session, incident.id)
    return IntakeResult(
        incident_id=incident.id, created=False, investigation_id=investigation_id, resolved_now=resolved_now
    )


def _early_warning_of(session: Session, payload: WebhookPayload, target: TargetConfig) -> Incident | None:
    """The scan's early-warning incident these alerts join (rca/store/early_warnings.py)."""
    instances = sorted({a.labels["instance"] for a in payload.alerts if a.labels.get("instance")})
    names = target.host_labels
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
