"""Notifications folded into incidents by the room (rca.incidents.alerts), on the real PostgreSQL:
a group's notification opens its incident, later ones join it, only a newly firing alert queues
another investigation (and not while one waits), its resolve notice resolves it; an SLA alert
about a warned target joins the early warning's incident instead of opening one."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from rca.domain.early_warning import ORIGIN
from rca.incidents.alerts import IntakeResult, Notice, NotificationIn, record
from rca.incidents.warnings import open_warning
from rca.intake.limits import IntakeLimits
from rca.intake.schema import WebhookPayload
from rca.store.db import session_scope
from rca.store.early_warnings import Named
from rca.store.models import IncidentRow, InvestigationRow, ScanTargetRow
from tests.helpers.databases import rows
from tests.helpers.payloads import make_alert, make_payload
from tests.helpers.service import make_settings

GROUP = '{}:{alertname="QueueHigh"}'


def named(payload: NotificationIn) -> Named:
    instances = [a.labels["instance"] for a in payload.alerts if "instance" in a.labels]
    return Named([a.fingerprint for a in payload.alerts], instances, [i.split(":")[0] for i in instances])


def folded(url: str, payload: dict[str, Any], owe_slack: bool = False) -> IntakeResult:
    limits = IntakeLimits.from_settings(make_settings(url, Path("/unused"))).context()
    notice = Notice(WebhookPayload.model_validate(payload, context=limits), payload)
    with session_scope(url) as session:
        [result] = record(session, [notice], owe_slack=owe_slack, named=named)
        return result


def investigations(url: str) -> list[tuple[str, str]]:
    query = select(InvestigationRow.status, InvestigationRow.reason).order_by(InvestigationRow.id)
    return [tuple(row) for row in rows(url, query)]


def test_a_group_opens_its_incident_and_later_notifications_join_it(pg_db: str) -> None:
    first = folded(pg_db, make_payload(GROUP, alerts=[make_alert("fp-1")]))
    assert first.created and first.investigation_id is not None
    resent = folded(pg_db, make_payload(GROUP, alerts=[make_alert("fp-1")]))
    while_queued = folded(pg_db, make_payload(GROUP, alerts=[make_alert("fp-1"), make_alert("fp-2")]))
    assert (resent.incident_id, resent.created, resent.investigation_id) == (first.incident_id, False, None)
    assert (while_queued.incident_id, while_queued.investigation_id) == (first.incident_id, None)  # one waits
    assert investigations(pg_db) == [("queued", "new_incident")]
    with session_scope(pg_db) as session:
        session.execute(update(InvestigationRow).values(status="running"))
    newly_firing = folded(pg_db, make_payload(GROUP, alerts=[make_alert("fp-3")]))
    assert newly_firing.investigation_id is not None
    assert investigations(pg_db) == [("running", "new_incident"), ("queued", "new_alerts")]
    resolved = folded(pg_db, make_payload(GROUP, alerts=[make_alert("fp-3", status="resolved")]), owe_slack=True)
    assert (resolved.incident_id, resolved.resolved_now, resolved.investigation_id) == (first.incident_id, True, None)
    with session_scope(pg_db) as session:
        incident = session.get(IncidentRow, first.incident_id)
        assert incident is not None
        assert (incident.status, incident.notification_count, incident.slack_owed) == ("resolved", 5, 1)
        assert sorted(a.fingerprint for a in incident.alerts) == ["fp-1", "fp-2", "fp-3"]


def test_an_sla_alert_about_a_warned_target_joins_the_warning(pg_db: str) -> None:
    now = datetime.now(UTC)
    with session_scope(pg_db) as session:
        labels = {"instance": "gpu-node-9:8000", "host": "gpu-node-9"}
        incident = open_warning(
            session, origin=ORIGIN, key="warn-1", title="queue rising", labels=labels, text="rising", warned_at=now
        )
        # The scan's state of the target it warned about, which names the warning's incident.
        session.add(
            ScanTargetRow(
                instance=labels["instance"], host=labels["host"], state="warning", since=now, incident_id=incident.id
            )
        )
        warning = incident.id
    joined = folded(pg_db, make_payload(GROUP, alerts=[make_alert("fp-sla", instance="gpu-node-9:8000")]))
    other = folded(
        pg_db, make_payload('{}:{alertname="Other"}', alerts=[make_alert("fp-x", instance="gpu-node-1:8000")])
    )
    assert (joined.incident_id, joined.created) == (warning, False)
    assert other.created and other.incident_id != warning
    with session_scope(pg_db) as session:
        incident = session.get(IncidentRow, warning)
        assert incident is not None
        assert "fp-sla" in {a.fingerprint for a in incident.alerts}
        assert incident.common_labels == labels  # the warning keeps its own labels, not the alert's
