"""Turn accepted webhooks into incident state, inside the caller's transaction.

What a notification does to its incident (open, join, resolve, queue an investigation, owe Slack)
is the incidents room's (rca/incidents/alerts.py); intake adds what only it knows: which of an
alert's labels name a host (the config file's), by which an alert joins the scan's warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from rca.collect.target import host_from_label
from rca.config import ScopeConfig
from rca.incidents import alerts
from rca.incidents.alerts import IntakeResult, Notice, NotificationIn
from rca.store import early_warnings

# What recording a notification answers, re-exported: the webhook reads them with the functions.
__all__ = ["IntakeResult", "Notice", "record_notification", "record_notifications"]


def record_notifications(
    session: Session,
    batch: Sequence[Notice],
    *,
    owe_slack: bool = False,
    scope: ScopeConfig | None = None,
) -> list[IntakeResult]:
    """Store the notifications, as if one after another (rca.incidents.alerts); one result each."""
    names = (scope or ScopeConfig()).host_labels
    return alerts.record(session, batch, owe_slack=owe_slack, named=lambda payload: _named(payload, names))


def record_notification(
    session: Session,
    payload: NotificationIn,
    raw: dict[str, Any],
    *,
    owe_slack: bool = False,
    scope: ScopeConfig | None = None,
) -> IntakeResult:
    """Store the notification and its alerts; decide whether a new investigation is needed. With
    `owe_slack` (Slack is configured), a resolve notice is owed to Slack in this transaction, so
    that the sweeper delivers it if its enqueue after the commit is lost. `scope`: the config
    file's host labels, by which an alert joins the scan's warning for its host."""
    [result] = record_notifications(session, [Notice(payload, raw)], owe_slack=owe_slack, scope=scope)
    return result


def _named(payload: NotificationIn, names: Sequence[str]) -> early_warnings.Named:
    """What the notification's alerts name that an early warning may be about."""
    instances = sorted({a.labels["instance"] for a in payload.alerts if a.labels.get("instance")})
    hosts = sorted({host_from_label(a.labels[n]) for a in payload.alerts for n in names if a.labels.get(n)})
    return early_warnings.Named([a.fingerprint for a in payload.alerts], instances, hosts)
