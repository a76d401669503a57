"""Turn accepted webhooks into incident state, inside the caller's transaction.

One incident per alert group while it is open (keyed on Alertmanager's groupKey). Re-sent alerts,
new alerts of the group and resolve notices update it; only a new incident or a newly firing
alert asks for a fresh investigation, so an alert storm costs one investigation.

Several notifications can be stored in one transaction (`record_notifications`, as the webhook
batches them under load: rca/api/batch.py), with the same outcome as storing them one after
another: the groups none of them has an incident for first, in bulk (one INSERT per table for all
of them), then the others in the order they came, each as `record_notification` stores one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session

from rca.collect.target import host_from_label
from rca.config import TargetConfig
from rca.domain.clock import utcnow
from rca.domain.status import AlertStatus, InvestigationStatus
from rca.intake.schema import WebhookAlert, WebhookPayload
from rca.store import bulk, digests, early_warnings, notices
from rca.store.models import Alert, Base, Incident, Investigation

ACTIVE_INVESTIGATION = (InvestigationStatus.QUEUED, InvestigationStatus.RUNNING)
REQUESTED = "requested"  # the reason of an investigation someone asked for (API, page, CLI)
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


# Statements are built once: one built per webhook cost more Python (building it, coercing each value
# into a bound parameter, hashing it for the compiled cache) than its round trip to the database.
NEW_NOTIFICATIONS = insert(NOTIFICATIONS)
NEW_ALERTS = insert(ALERTS)
# The open incidents of several groups, locked in the order of their keys: two transactions that
# lock some of the same groups wait for each other instead of deadlocking.
OPEN_INCIDENTS = (
    select(Incident)
    .where(Incident.group_key.in_(bindparam("group_keys", expanding=True)), Incident.status == AlertStatus.FIRING)
    .order_by(Incident.group_key)
    .with_for_update()
)
ALERTS_OF = select(Alert).where(
    Alert.incident_id.in_(bindparam("incident_ids", expanding=True)),
    Alert.fingerprint.in_(bindparam("fingerprints", expanding=True)),
)
LATEST_INCIDENT = (
    select(Incident).where(Incident.group_key == bindparam("group_key")).order_by(Incident.id.desc()).limit(1)
)


@dataclass(frozen=True)
class Notice:
    """One accepted notification: the validated payload and the JSON it came as (stored as sent)."""

    payload: WebhookPayload
    raw: dict[str, Any]


def _existing_alerts(session: Session, wanted: dict[int, set[str]]) -> dict[int, dict[str, Alert]]:
    """The stored alerts of these incidents with these fingerprints (incident id -> fingerprints),
    in one SELECT per `BATCH` fingerprints for all of them rather than one per alert or incident (a
    storm's notification carries up to RCA_WEBHOOK_MAX_ALERTS of them)."""
    found: dict[int, dict[str, Alert]] = {incident_id: {} for incident_id in wanted}
    fingerprints = sorted({f for named in wanted.values() for f in named})
    for start in range(0, len(fingerprints), BATCH):
        chunk = {"incident_ids": list(wanted), "fingerprints": fingerprints[start : start + BATCH]}
        for row in session.scalars(ALERTS_OF, chunk):
            if row.fingerprint in wanted[row.incident_id]:
                found[row.incident_id][row.fingerprint] = row
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
    session: Session, incident: Incident, notice: Notice, rows: dict[str, Alert], now: datetime
) -> tuple[bool, bool]:
    """Insert or refresh the alerts of a known incident; `rows` holds its stored ones (by
    fingerprint) among the notification's, and gains the new ones. Returns whether any is newly
    firing in this incident, and whether its searchable text changed (a new alert, or new annotations)."""
    newly_firing = text_changed = False
    for fingerprint, (alert, raw) in _latest_copies(notice.payload.alerts, notice.raw["alerts"]).items():
        row = rows.get(fingerprint)
        if row is None:
            rows[fingerprint] = Alert(**_new_alert(incident.id, alert, raw, now))
            session.add(rows[fingerprint])
            newly_firing |= alert.status == AlertStatus.FIRING
            text_changed = True
            continue
        newly_firing |= row.status == AlertStatus.RESOLVED and alert.status == AlertStatus.FIRING
        text_changed |= row.annotations != alert.annotations
        for name, value in _alert_values(alert, raw, now).items():
            setattr(row, name, value)
    return newly_firing, text_changed


def _incident_columns(payload: WebhookPayload, now: datetime) -> dict[str, Any]:
    """The row of a group's new incident."""
    return {
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


def _record_new_groups(session: Session, batch: Sequence[Notice]) -> list[IntakeResult]:
    """Groups with no incident to join: their incidents, notifications and alerts, an investigation
    for each that fires, and their search digests. Each table gets one INSERT of the rows in hand
    for the whole batch, without the unit of work's bookkeeping (the profile of
    bench/intake_throughput.py put most of a new group's CPU there); nothing is read back but ids."""
    if not batch:
        return []
    now = utcnow()
    columns = [_incident_columns(notice.payload, now) for notice in batch]
    ids = bulk.insert_rows(session, INCIDENTS, columns)
    incidents = [Incident(id=i, **c) for i, c in zip(ids, columns, strict=True)]  # outside the session
    session.execute(
        NEW_NOTIFICATIONS,
        [
            {"incident_id": i, "status": n.payload.status, "payload": n.raw, "received_at": now}
            for i, n in zip(ids, batch, strict=True)
        ],
    )
    alerts = [
        [_new_alert(i, alert, copy, now) for alert, copy in _latest_copies(n.payload.alerts, n.raw["alerts"]).values()]
        for i, n in zip(ids, batch, strict=True)
    ]
    session.execute(NEW_ALERTS, [row for rows in alerts for row in rows])
    firing = [incident.id for incident in incidents if incident.status == AlertStatus.FIRING]
    queued = [{"incident_id": i, "status": InvestigationStatus.QUEUED, "reason": "new_incident"} for i in firing]
    queued_ids = bulk.insert_rows(session, INVESTIGATIONS, queued)
    investigations = dict(zip(firing, queued_ids, strict=True))
    digests.write_new(session, [(i, [Alert(**row) for row in rows]) for i, rows in zip(incidents, alerts, strict=True)])
    return [IntakeResult(i, created=True, investigation_id=investigations.get(i)) for i in ids]


def _incidents_of(session: Session, batch: Sequence[Notice], target: TargetConfig) -> list[Incident | None]:
    """The incident each notification (of a different group each) folds into, locked, or None for a
    new group: the group's open incident, else the early warning its alerts join, else, for a
    resolve notice, the group's latest incident. One round trip for the open incidents of the whole
    batch, one for the early warnings of those left."""
    keys = [notice.payload.groupKey for notice in batch]
    found: dict[str, Incident | None] = dict.fromkeys(keys)
    found.update((row.group_key, row) for row in session.scalars(OPEN_INCIDENTS, {"group_keys": sorted(keys)}))
    unopened = [notice.payload for notice in batch if found[notice.payload.groupKey] is None]
    joined = early_warnings.joined_incidents(session, [_named(payload, target) for payload in unopened])
    for payload, incident_id in zip(unopened, joined, strict=True):
        if incident_id is not None:
            found[payload.groupKey] = session.get(Incident, incident_id, with_for_update=True)
        elif payload.status == AlertStatus.RESOLVED:
            # A resolve notice for a group we already closed (or never saw firing).
            found[payload.groupKey] = session.scalar(LATEST_INCIDENT, {"group_key": payload.groupKey})
    return [found[key] for key in keys]


def record_notifications(
    session: Session,
    batch: Sequence[Notice],
    *,
    owe_slack: bool = False,
    target: TargetConfig | None = None,
) -> list[IntakeResult]:
    """Store the notifications, as if one after another (see the module's docstring); one result each."""
    target = target or TargetConfig()
    first: dict[str, int] = {}  # each group's first notification in the batch
    for index, notice in enumerate(batch):
        first.setdefault(notice.payload.groupKey, index)
    heads = list(first.values())
    incidents = dict(zip(heads, _incidents_of(session, [batch[i] for i in heads], target), strict=True))
    new = [i for i in heads if incidents[i] is None]
    results: dict[int, IntakeResult] = dict(zip(new, _record_new_groups(session, [batch[i] for i in new]), strict=True))
    wanted: dict[int, set[str]] = {}
    for index, incident in incidents.items():
        if incident is not None:
            wanted.setdefault(incident.id, set()).update(alert.fingerprint for alert in batch[index].payload.alerts)
    known = _existing_alerts(session, wanted)
    notifications: list[dict[str, Any]] = []
    for index, notice in enumerate(batch):
        incident = incidents.get(index)
        if incident is not None:
            results[index] = _fold(session, incident, notice, owe_slack, known[incident.id], notifications)
        elif index not in results:  # a later notification of a group: it sees what the earlier ones stored
            _insert(session, notifications)
            results[index] = record_notification(
                session, notice.payload, notice.raw, owe_slack=owe_slack, target=target
            )
    _insert(session, notifications)
    return [results[index] for index in range(len(batch))]


def _insert(session: Session, notifications: list[dict[str, Any]]) -> None:
    """Insert the notifications folded so far, in the order they came, and forget them."""
    if notifications:
        session.execute(NEW_NOTIFICATIONS, notifications)
        notifications.clear()


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
    [result] = record_notifications(session, [Notice(payload, raw)], owe_slack=owe_slack, target=target)
    return result


def _fold(
    session: Session,
    incident: Incident,
    notice: Notice,
    owe_slack: bool,
    alerts: dict[str, Alert],
    notifications: list[dict[str, Any]],
) -> IntakeResult:
    """Fold a notification into the incident its group (or its early warning) already has. `alerts`:
    the incident's stored alerts among the notification's; the notification's row is added to
    `notifications`, which the caller inserts with the others (nothing here reads them). A plain
    re-send reads nothing and writes only through the session, so that one flush writes all of a
    batch's re-sends together."""
    payload, raw = notice.payload, notice.raw
    now = utcnow()
    notifications.append({"incident_id": incident.id, "status": payload.status, "payload": raw, "received_at": now})
    newly_firing, text_changed = _upsert_alerts(session, incident, notice, alerts, now)
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


def _named(payload: WebhookPayload, target: TargetConfig) -> early_warnings.Named:
    """What the notification's alerts name that an early warning may be about."""
    instances = sorted({a.labels["instance"] for a in payload.alerts if a.labels.get("instance")})
    names = target.host_labels
    hosts = sorted({host_from_label(a.labels[n]) for a in payload.alerts for n in names if a.labels.get(n)})
    return early_warnings.Named([a.fingerprint for a in payload.alerts], instances, hosts)


@dataclass(frozen=True)
class Requested:
    """What asking for an investigation of an incident got: a new one to enqueue (`created`), or the
    one already there that answers the request instead of another piling up."""

    investigation_id: int
    created: bool
    status: str
    requested_by: str | None


def _queue(
    session: Session, incident: Incident, reason: str, unless: Sequence[str], requested_by: str | None = None
) -> Requested:
    """The one way an investigation is queued: unless the incident has one in the `unless`
    statuses already (the newest such answers)."""
    waiting = session.execute(
        select(Investigation.id, Investigation.status, Investigation.requested_by)
        .where(Investigation.incident_id == incident.id, Investigation.status.in_(unless))
        .order_by(Investigation.id.desc())
        .limit(1)
    ).first()
    if waiting is not None:
        return Requested(waiting.id, False, waiting.status, waiting.requested_by)
    investigation = Investigation(
        incident_id=incident.id,
        status=InvestigationStatus.QUEUED,
        reason=reason,
        requested_by=requested_by,
        attempts=0,
    )
    session.add(investigation)
    session.flush()
    return Requested(investigation.id, True, InvestigationStatus.QUEUED, requested_by)


def _request_investigation(session: Session, incident: Incident, reason: str) -> int | None:
    """Queue an investigation unless one is already waiting to run (it will see the new alerts; a
    running one may not have, so new alerts queue another beside it)."""
    queued = _queue(session, incident, reason, unless=(InvestigationStatus.QUEUED,))
    return queued.investigation_id if queued.created else None


def investigate_again(
    session: Session,
    incident_id: int,
    reason: str = REQUESTED,
    requested_by: str | None = None,
    *,
    unless: Sequence[str] = ACTIVE_INVESTIGATION,
) -> Requested | None:
    """Queue a fresh investigation of the incident now, firing or resolved (an engineer fixed
    RCA_PROMETHEUS_URL after it resolved; `rca demo` runs again on its one incident), beside the
    earlier ones; unless one is queued or running already (`unless`), which answers instead. None
    when there is no such incident. The incident's row is locked first, so that two requests at
    once queue one."""
    if session.get_bind().dialect.name == "sqlite":
        # No row locks, and the driver begins a transaction only at a write: write first (a no-op),
        # so that requests at once take the database's one write lock in turn, each seeing the last's.
        session.execute(update(Incident).where(Incident.id == incident_id).values(id=Incident.id))
    incident = session.get(Incident, incident_id, with_for_update=True)
    if incident is None:
        return None
    return _queue(session, incident, reason, unless=unless, requested_by=requested_by)
