"""The scan's early-warning incidents, as the room keeps them: opened with the warning's own alert
(the live scan's and the backtest's, `rca.scan`), fired again and cleared with it. What the warning
says and when it is raised are the scan's; the rows are written here."""

from __future__ import annotations

import hashlib
from datetime import datetime

from sqlalchemy.orm import Session

from rca.domain.clock import utcnow
from rca.domain.early_warning import ALERTNAME
from rca.domain.status import AlertStatus
from rca.incidents.opened import open_incidents
from rca.incidents.status import fire, resolve
from rca.store.models import IncidentRow

RECEIVER = "rca-scan"


def open_warning(
    session: Session,
    *,
    origin: str,
    key: str,
    title: str,
    labels: dict[str, str],
    text: str,
    warned_at: datetime,
    created_at: datetime | None = None,
) -> IncidentRow:
    """A warning's incident (group `key`) with its one firing alert, which starts when the scan
    warned; `created_at` (default now) places it in time (a backtest's: when it would have warned)."""
    now = utcnow()
    annotations = {"summary": text}
    incident = {
        "group_key": key,
        "status": AlertStatus.FIRING,
        "title": title,
        "alertname": ALERTNAME,
        "receiver": RECEIVER,
        "group_labels": {"instance": labels["instance"]},
        "common_labels": labels,
        "common_annotations": annotations,
        "notification_count": 0,
        "origin": origin,
        "created_at": created_at or now,
        "updated_at": now,
    }
    alert = {
        "fingerprint": hashlib.sha256(key.encode()).hexdigest()[:16],
        "alertname": ALERTNAME,
        "status": AlertStatus.FIRING,
        "labels": labels,
        "annotations": annotations,
        # When the scan warned, as Prometheus dates an alert from when it fired: the
        # investigation's "now" starts there (rca/signals/findings.current_since), so it judges
        # the signals as the scan did; when they started moving is in the summary and figures.
        "starts_at": warned_at,
        "raw": {},
        "first_seen_at": now,
        "last_seen_at": now,
    }
    [incident_id] = open_incidents(session, [incident], [[alert]])
    opened = session.get(IncidentRow, incident_id)
    assert opened is not None  # inserted just now, in this transaction
    return opened


def set_warning(
    session: Session, incident: IncidentRow, status: AlertStatus, text: str | None = None, at: datetime | None = None
) -> bool:
    """Fire or resolve the warning's own alert, and the incident with it unless an SLA alert that
    joined it still fires (`rca.incidents.status.resolve`), `at` that time (default now); True when
    the incident changed status."""
    now = at or utcnow()
    for alert in incident.alerts:
        if alert.alertname == ALERTNAME:
            alert.status = status
            alert.ends_at = now if status == AlertStatus.RESOLVED else None
            alert.last_seen_at = now
    if text:
        incident.common_annotations = {**(incident.common_annotations or {}), "summary": text}
    incident.updated_at = now
    if status == AlertStatus.RESOLVED:
        return resolve(session, incident, now)
    return fire(incident)
