"""The room's lock order as code (rca.incidents.locks), on the real PostgreSQL: the open incidents
of several groups in the order of their keys, one incident by id, held until the transaction ends,
and what follows a change (the Slack notice owed, then the digest) written in that order."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from rca.domain.status import AlertStatus
from rca.incidents.locks import after_change, lock_groups, lock_incident
from rca.incidents.opened import open_incidents
from rca.store.db import session_scope
from rca.store.models import IncidentDigestRow, IncidentRow
from tests.helpers import factories


def opened(url: str, *incidents: dict[str, object]) -> list[int]:
    with session_scope(url) as session:
        return open_incidents(session, list(incidents), [[factories.alert()] for _ in incidents])


def test_the_open_incidents_of_groups_come_locked_in_the_order_of_their_keys(pg_db: str) -> None:
    c, a, _resolved = opened(
        pg_db, factories.incident("g-c"), factories.incident("g-a"), factories.incident("g-b", status="resolved")
    )
    with session_scope(pg_db) as session:
        locked = lock_groups(session, ["g-c", "g-b", "g-a", "g-none"])
        assert [(i.group_key, i.id) for i in locked] == [("g-a", a), ("g-c", c)]


def test_an_incident_locked_by_id_waits_for_the_transaction_that_holds_it(pg_db: str) -> None:
    [incident_id] = opened(pg_db, factories.incident())
    with session_scope(pg_db) as holder:
        held = lock_incident(holder, incident_id)
        assert held is not None and held.id == incident_id
        with pytest.raises(OperationalError, match="lock"), session_scope(pg_db) as other:
            other.execute(text("SET LOCAL lock_timeout = '200ms'"))
            lock_incident(other, incident_id)
    with session_scope(pg_db) as session:  # released at the holder's commit
        assert lock_incident(session, incident_id) is not None
        assert lock_incident(session, incident_id + 1) is None


def test_after_a_change_slack_is_owed_and_the_digest_rewritten_each_only_when_asked(pg_db: str) -> None:
    [incident_id] = opened(pg_db, factories.incident())
    with session_scope(pg_db) as session:
        incident = session.get(IncidentRow, incident_id)
        assert incident is not None
        incident.status = AlertStatus.RESOLVED
        after_change(session, incident_id, owe_slack=False, reindex=False)
    with session_scope(pg_db) as session:
        incident, digest = session.get(IncidentRow, incident_id), session.get(IncidentDigestRow, incident_id)
        assert incident is not None and digest is not None
        assert (incident.slack_owed, incident.slack_owed_since, digest.status) == (0, None, "firing")
        after_change(session, incident_id, owe_slack=True)
    with session_scope(pg_db) as session:
        incident, digest = session.get(IncidentRow, incident_id), session.get(IncidentDigestRow, incident_id)
        assert incident is not None and digest is not None
        assert incident.slack_owed == 1 and incident.slack_owed_since is not None
        assert digest.status == "resolved"
