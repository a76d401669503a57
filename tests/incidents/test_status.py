"""The one place an incident's status changes (rca.incidents.status), and the scan's warnings on
top of it (rca.incidents.warnings), on the real PostgreSQL: "resolve unless another alert still
fires"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rca.domain.early_warning import ALERTNAME, ORIGIN
from rca.domain.status import AlertStatus
from rca.incidents.opened import open_incidents
from rca.incidents.status import fire, resolve
from rca.incidents.warnings import open_warning, set_warning
from rca.store.db import session_scope
from rca.store.models import AlertRow, IncidentRow
from tests.helpers import factories

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
WARNED = {"instance": "gpu-node-9:8000", "host": "gpu-node-9"}


def opened(url: str, **overrides: object) -> int:
    with session_scope(url) as session:
        [incident_id] = open_incidents(session, [factories.incident(**overrides)], [[factories.alert()]])
    return incident_id


def warning(url: str) -> int:
    """An early warning's incident, which an SLA alert about its target joined and still fires."""
    with session_scope(url) as session:
        incident = open_warning(
            session, origin=ORIGIN, key="warn-1", title="queue rising", labels=WARNED, text="rising", warned_at=AT
        )
        session.add(AlertRow(incident_id=incident.id, **factories.alert("fp-sla")))
        return incident.id


def status_of(url: str, incident_id: int) -> tuple[str, datetime | None]:
    with session_scope(url) as session:
        incident = session.get(IncidentRow, incident_id)
        assert incident is not None
        return incident.status, incident.resolved_at


def test_an_alertmanager_incident_resolves_once_with_its_group(pg_db: str) -> None:
    incident_id = opened(pg_db)
    with session_scope(pg_db) as session:
        incident = session.get(IncidentRow, incident_id)
        assert incident is not None
        assert resolve(session, incident, AT) is True
        assert resolve(session, incident, AT + timedelta(minutes=5)) is False  # already resolved
    assert status_of(pg_db, incident_id) == ("resolved", AT)


def test_an_incident_fires_again_only_once_resolved(pg_db: str) -> None:
    incident_id = opened(pg_db, status="resolved")
    with session_scope(pg_db) as session:
        incident = session.get(IncidentRow, incident_id)
        assert incident is not None
        assert fire(incident) is True
        assert fire(incident) is False
    assert status_of(pg_db, incident_id) == ("firing", None)


def test_a_warning_that_an_alert_joined_resolves_only_when_none_of_its_alerts_fires(pg_db: str) -> None:
    incident_id = warning(pg_db)
    with session_scope(pg_db) as session:
        incident = session.get(IncidentRow, incident_id)
        assert incident is not None
        assert set_warning(session, incident, AlertStatus.RESOLVED, "cleared", at=AT) is False  # the SLA alert fires
        assert resolve(session, incident, AT) is False
    assert status_of(pg_db, incident_id) == ("firing", None)
    with session_scope(pg_db) as session:
        incident = session.get(IncidentRow, incident_id)
        assert incident is not None
        [own] = [a for a in incident.alerts if a.alertname == ALERTNAME]
        assert (own.status, own.ends_at) == ("resolved", AT)
        [sla] = [a for a in incident.alerts if a.fingerprint == "fp-sla"]
        sla.status = AlertStatus.RESOLVED
        assert resolve(session, incident, AT + timedelta(minutes=1)) is True
    assert status_of(pg_db, incident_id) == ("resolved", AT + timedelta(minutes=1))


def test_a_warning_fires_again_with_its_own_alert(pg_db: str) -> None:
    incident_id = warning(pg_db)
    with session_scope(pg_db) as session:
        incident = session.get(IncidentRow, incident_id)
        assert incident is not None
        incident.alerts[-1].status = AlertStatus.RESOLVED  # the SLA alert
        assert set_warning(session, incident, AlertStatus.RESOLVED, at=AT) is True
    with session_scope(pg_db) as session:
        incident = session.get(IncidentRow, incident_id)
        assert incident is not None
        assert set_warning(session, incident, AlertStatus.FIRING, "rising again") is True
        assert incident.common_annotations["summary"] == "rising again"
    assert status_of(pg_db, incident_id) == ("firing", None)
