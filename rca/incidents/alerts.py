"""Alertmanager notifications folded into incidents, inside the caller's transaction: a notification
joins its group's open incident (keyed on Alertmanager's groupKey), else the early warning its
alerts name, else it opens one. Re-sent alerts, new alerts of the group and resolve notices update
the incident; only a new incident or a newly firing alert queues a fresh investigation, so an
alert storm costs one investigation.

Several notifications can be stored in one transaction (`record`, as the webhook batches them under
load: rca/api/batch.py), with the same outcome as storing them one after another: the groups none
of them has an incident for first, in bulk (one INSERT per table for all of them), then the others
in the order they came, each as `record_one` stores one.

The notification is read through `NotificationIn` (which rca.intake.schema's validated payload
is), so that this room needs nothing of intake's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import bindparam, insert, select
from sqlalchemy.orm import Session

from rca.domain.clock import utcnow
from rca.domain.early_warning import ORIGIN
from rca.domain.hosts import Fleet
from rca.domain.status import AlertStatus
from rca.incidents.locks import after_change, lock_groups, lock_incident
from rca.incidents.opened import open_incidents
from rca.incidents.queue import WAITING, planned_round, queue, queue_new
from rca.incidents.status import resolve
from rca.store import early_warnings
from rca.store.models import AlertRow, Base, IncidentRow

NOTIFICATIONS = Base.metadata.tables["notifications"]
BATCH = 500  # fingerprints per SELECT: well under any backend's limit on bound parameters

# Statements are built once: one built per webhook cost more Python (building it, coercing each value
# into a bound parameter, hashing it for the compiled cache) than its round trip to the database.
NEW_NOTIFICATIONS = insert(NOTIFICATIONS)
ALERTS_OF = select(AlertRow).where(
    AlertRow.incident_id.in_(bindparam("incident_ids", expanding=True)),
    AlertRow.fingerprint.in_(bindparam("fingerprints", expanding=True)),
)
LATEST_INCIDENT = (
    select(IncidentRow).where(IncidentRow.group_key == bindparam("group_key")).order_by(IncidentRow.id.desc()).limit(1)
)


class AlertIn(Protocol):
    """One alert of a notification, as Alertmanager sends it and names its fields
    (rca.intake.schema.WebhookAlert)."""

    @property
    def fingerprint(self) -> str: ...
    @property
    def alertname(self) -> str | None: ...
    @property
    def status(self) -> str: ...
    @property
    def labels(self) -> dict[str, str]: ...
    @property
    def annotations(self) -> dict[str, str]: ...
    @property
    def startsAt(self) -> datetime: ...
    @property
    def endsAt(self) -> datetime | None: ...
    @property
    def generatorURL(self) -> str: ...


class NotificationIn(Protocol):
    """A notification of an alert group (rca.intake.schema.WebhookPayload)."""

    @property
    def groupKey(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def receiver(self) -> str: ...
    @property
    def groupLabels(self) -> dict[str, str]: ...
    @property
    def commonLabels(self) -> dict[str, str]: ...
    @property
    def commonAnnotations(self) -> dict[str, str]: ...
    @property
    def externalURL(self) -> str: ...
    @property
    def alerts(self) -> Sequence[AlertIn]: ...
    def title(self) -> str: ...


@dataclass(frozen=True)
class Notice:
    """One accepted notification: the validated payload and the JSON it came as (stored as sent)."""

    payload: NotificationIn
    raw: dict[str, Any]


@dataclass(frozen=True)
class IntakeResult:
    incident_id: int
    created: bool
    investigation_ids: tuple[int, ...] = ()  # the round to enqueue after commit (none queued: empty)
    resolved_now: bool = False  # this notification resolved the incident: tell Slack after commit

    @property
    def investigation_id(self) -> int | None:
        """The round's first investigation (its `round_id` when it has several), None if none queued."""
        return self.investigation_ids[0] if self.investigation_ids else None


# What a notification's alerts name that an early warning may be about (the caller knows which
# labels name a host: its config file).
Naming = Callable[[NotificationIn], early_warnings.Named]


def _existing_alerts(session: Session, wanted: dict[int, set[str]]) -> dict[int, dict[str, AlertRow]]:
    """The stored alerts of these incidents with these fingerprints (incident id -> fingerprints),
    in one SELECT per `BATCH` fingerprints for all of them rather than one per alert or incident (a
    storm's notification carries up to RCA_WEBHOOK_MAX_ALERTS of them)."""
    found: dict[int, dict[str, AlertRow]] = {incident_id: {} for incident_id in wanted}
    fingerprints = sorted({f for named in wanted.values() for f in named})
    for start in range(0, len(fingerprints), BATCH):
        chunk = {"incident_ids": list(wanted), "fingerprints": fingerprints[start : start + BATCH]}
        for row in session.scalars(ALERTS_OF, chunk):
            if row.fingerprint in wanted[row.incident_id]:
                found[row.incident_id][row.fingerprint] = row
    return found


def _alert_values(alert: AlertIn, raw: dict[str, Any], now: datetime) -> dict[str, Any]:
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
    alerts: Sequence[AlertIn], raw_alerts: list[dict[str, Any]]
) -> dict[str, tuple[AlertIn, dict[str, Any]]]:
    """The notification's alerts by fingerprint: a fingerprint repeated within one notification is
    one alert, and the later copy wins."""
    return {alert.fingerprint: (alert, raw) for alert, raw in zip(alerts, raw_alerts, strict=True)}


def _new_alert(alert: AlertIn, raw: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The columns of an alert first seen now (its incident's id added where it is known)."""
    return {
        "fingerprint": alert.fingerprint,
        "alertname": alert.alertname,
        "labels": alert.labels,
        "first_seen_at": now,
        **_alert_values(alert, raw, now),
    }


def _upsert_alerts(
    session: Session, incident: IncidentRow, notice: Notice, rows: dict[str, AlertRow], now: datetime
) -> tuple[bool, bool]:
    """Insert or refresh the alerts of a known incident; `rows` holds its stored ones (by
    fingerprint) among the notification's, and gains the new ones. Returns whether any is newly
    firing in this incident, and whether its searchable text changed (a new alert, or new annotations)."""
    newly_firing = text_changed = False
    for fingerprint, (alert, raw) in _latest_copies(notice.payload.alerts, notice.raw["alerts"]).items():
        row = rows.get(fingerprint)
        if row is None:
            rows[fingerprint] = AlertRow(incident_id=incident.id, **_new_alert(alert, raw, now))
            session.add(rows[fingerprint])
            newly_firing |= alert.status == AlertStatus.FIRING
            text_changed = True
            continue
        newly_firing |= row.status == AlertStatus.RESOLVED and alert.status == AlertStatus.FIRING
        text_changed |= row.annotations != alert.annotations
        for name, value in _alert_values(alert, raw, now).items():
            setattr(row, name, value)
    return newly_firing, text_changed


def _incident_columns(payload: NotificationIn, now: datetime) -> dict[str, Any]:
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


def _record_new_groups(session: Session, batch: Sequence[Notice], fleet: Fleet | None) -> list[IntakeResult]:
    """Groups with no incident to join: their incidents with their alerts and search digests, their
    notifications, and an investigation for each that fires; each table gets one INSERT for the
    whole batch (rca.incidents.opened)."""
    if not batch:
        return []
    now = utcnow()
    columns = [_incident_columns(notice.payload, now) for notice in batch]
    alerts = [
        [_new_alert(alert, copy, now) for alert, copy in _latest_copies(n.payload.alerts, n.raw["alerts"]).values()]
        for n in batch
    ]
    ids = open_incidents(session, columns, alerts)
    session.execute(
        NEW_NOTIFICATIONS,
        [
            {"incident_id": i, "status": n.payload.status, "payload": n.raw, "received_at": now}
            for i, n in zip(ids, batch, strict=True)
        ],
    )
    firing = [(i, group) for i, c, group in zip(ids, columns, alerts, strict=True) if c["status"] == AlertStatus.FIRING]
    rounds = [planned_round(fleet, [(alert["labels"], alert["status"]) for alert in group]) for _, group in firing]
    queued = queue_new(session, [i for i, _ in firing], "new_incident", rounds)
    investigations = dict(zip([i for i, _ in firing], queued, strict=True))
    return [IntakeResult(i, created=True, investigation_ids=investigations.get(i, ())) for i in ids]


def _incidents_of(session: Session, batch: Sequence[Notice], named: Naming) -> list[IncidentRow | None]:
    """The incident each notification (of a different group each) folds into, locked, or None for a
    new group: the group's open incident, else the early warning its alerts join, else, for a
    resolve notice, the group's latest incident. One round trip for the open incidents of the whole
    batch, one for the early warnings of those left."""
    keys = [notice.payload.groupKey for notice in batch]
    found: dict[str, IncidentRow | None] = dict.fromkeys(keys)
    found.update((row.group_key, row) for row in lock_groups(session, keys))
    unopened = [notice.payload for notice in batch if found[notice.payload.groupKey] is None]
    joined = early_warnings.joined_incidents(session, [named(payload) for payload in unopened])
    for payload, incident_id in zip(unopened, joined, strict=True):
        if incident_id is not None:
            found[payload.groupKey] = lock_incident(session, incident_id)
        elif payload.status == AlertStatus.RESOLVED:
            # A resolve notice for a group we already closed (or never saw firing).
            found[payload.groupKey] = session.scalar(LATEST_INCIDENT, {"group_key": payload.groupKey})
    return [found[key] for key in keys]


def record(
    session: Session, batch: Sequence[Notice], *, owe_slack: bool, named: Naming, fleet: Fleet | None = None
) -> list[IntakeResult]:
    """Store the notifications, as if one after another (see the module's docstring); one result
    each. With `owe_slack` (Slack is configured), a resolve notice is owed to Slack in this
    transaction, so that the sweeper delivers it if its enqueue after the commit is lost. With a
    `fleet`, an incident whose alerts name several hosts queues one investigation per host."""
    first: dict[str, int] = {}  # each group's first notification in the batch
    for index, notice in enumerate(batch):
        first.setdefault(notice.payload.groupKey, index)
    heads = list(first.values())
    incidents = dict(zip(heads, _incidents_of(session, [batch[i] for i in heads], named), strict=True))
    new = [i for i in heads if incidents[i] is None]
    results: dict[int, IntakeResult] = dict(
        zip(new, _record_new_groups(session, [batch[i] for i in new], fleet), strict=True)
    )
    wanted: dict[int, set[str]] = {}
    for index, incident in incidents.items():
        if incident is not None:
            wanted.setdefault(incident.id, set()).update(alert.fingerprint for alert in batch[index].payload.alerts)
    known = _existing_alerts(session, wanted)
    notifications: list[dict[str, Any]] = []
    for index, notice in enumerate(batch):
        incident = incidents.get(index)
        if incident is not None:
            results[index] = _fold(session, incident, notice, owe_slack, known[incident.id], notifications, fleet)
        elif index not in results:  # a later notification of a group: it sees what the earlier ones stored
            _insert(session, notifications)
            [results[index]] = record(session, [notice], owe_slack=owe_slack, named=named, fleet=fleet)
    _insert(session, notifications)
    return [results[index] for index in range(len(batch))]


def _insert(session: Session, notifications: list[dict[str, Any]]) -> None:
    """Insert the notifications folded so far, in the order they came, and forget them."""
    if notifications:
        session.execute(NEW_NOTIFICATIONS, notifications)
        notifications.clear()


def _fold(
    session: Session,
    incident: IncidentRow,
    notice: Notice,
    owe_slack: bool,
    alerts: dict[str, AlertRow],
    notifications: list[dict[str, Any]],
    fleet: Fleet | None,
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
    joined = incident.origin == ORIGIN  # the scan's incident keeps its own labels and text
    common = (payload.commonLabels, payload.commonAnnotations)
    if not joined:
        text_changed |= (incident.common_labels, incident.common_annotations) != common
        incident.common_labels, incident.common_annotations = common
    incident.notification_count += 1
    incident.updated_at = now
    resolved_now = payload.status == AlertStatus.RESOLVED and resolve(session, incident, now)
    investigation_ids: tuple[int, ...] = ()
    if incident.status == AlertStatus.FIRING and newly_firing:
        session.flush()
        investigation_ids = queue(session, incident.id, "new_alerts", unless=WAITING, fleet=fleet).ids
    # A plain re-send changes nothing the digest is built from.
    after_change(session, incident.id, owe_slack=resolved_now and owe_slack, reindex=text_changed or resolved_now)
    return IntakeResult(
        incident_id=incident.id, created=False, investigation_ids=investigation_ids, resolved_now=resolved_now
    )
