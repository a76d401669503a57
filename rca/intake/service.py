"""Turn accepted webhooks into incident state, inside the caller's transaction.

What a notification does to its incident (open, join, resolve, queue an investigation, owe Slack)
is the incidents room's (rca/incidents/alerts.py); intake adds what only it knows: which of an
alert's labels name a host (the config file's), by which an alert joins the scan's warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from rca.config import ScopeConfig, Settings
from rca.domain.hosts import Fleet, host_from_label
from rca.incidents import alerts
from rca.incidents.alerts import IntakeResult, Notice, NotificationIn
from rca.store import early_warnings

# What recording a notification answers, re-exported: the webhook reads them with the functions.
__all__ = ["IntakeResult", "Notice", "fleet_of", "record_notification", "record_notifications"]


def fleet_of(settings: Settings) -> Fleet:
    """How the settings split an incident into hosts: the config file's host labels, at most
    RCA_FLEET_MAX_HOSTS of them investigated (rca.domain.hosts)."""
    return Fleet(tuple(settings.file_config().target.host_labels), settings.fleet_max_hosts)


def record_notifications(
    session: Session,
    batch: Sequence[Notice],
    *,
    owe_slack: bool = False,
    fleet: Fleet | None = None,
) -> list[IntakeResult]:
    """Store the notifications, as if one after another (rca.incidents.alerts); one result each.
    With a `fleet` (`fleet_of` the settings), an incident whose alerts name several hosts queues one
    investigation per host; without, one investigation per incident, hosts named by the default
    host labels."""
    names = fleet.host_labels if fleet else ScopeConfig().host_labels
    return alerts.record(session, batch, owe_slack=owe_slack, named=lambda payload: _named(payload, names), fleet=fleet)


def record_notification(
    session: Session,
    payload: NotificationIn,
    raw: dict[str, Any],
    *,
    owe_slack: bool = False,
    fleet: Fleet | None = None,
) -> IntakeResult:
    """Store the notification and its alerts; decide whether a new investigation is needed. With
    `owe_slack` (Slack is configured), a resolve notice is owed to Slack in this transaction, so
    that the sweeper delivers it if its enqueue after the commit is lost. `fleet`: the config
    file's host labels, by which an alert joins the scan's warning for its host and a fleet
    incident is investigated host by host."""
    [result] = record_notifications(session, [Notice(payload, raw)], owe_slack=owe_slack, fleet=fleet)
    return result


def _named(payload: NotificationIn, names: Sequence[str]) -> early_warnings.Named:
    """What the notification's alerts name that an early warning may be about."""
    instances = sorted({a.labels["instance"] for a in payload.alerts if a.labels.get("instance")})
    hosts = sorted({host_from_label(a.labels[n]) for a in payload.alerts for n in names if a.labels.get(n)})
    return early_warnings.Named([a.fingerprint for a in payload.alerts], instances, hosts)
