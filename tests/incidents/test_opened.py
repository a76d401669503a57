"""The one place an incident is opened (rca.incidents.opened), on the real PostgreSQL: incidents,
their first alerts and their search digests, one INSERT per table, the ids in order."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from rca.incidents.opened import open_incidents
from rca.store.db import session_scope
from rca.store.models import AlertRow, IncidentDigestRow
from tests.helpers import factories
from tests.helpers.databases import count_rows, rows


def test_incidents_open_with_their_alerts_and_digests_and_their_ids_in_order(pg_db: str) -> None:
    with session_scope(pg_db) as session:
        ids = open_incidents(
            session,
            [factories.incident("g-a", title="queue high on a"), factories.incident("g-b", status="resolved")],
            [[factories.alert("fp-a1"), factories.alert("fp-a2")], [factories.alert("fp-b1", status="resolved")]],
        )
    assert len(ids) == 2 and ids[0] < ids[1]
    counts = count_rows(pg_db)
    assert (counts["incidents"], counts["alerts"]) == (2, 3)
    alerts = rows(pg_db, select(AlertRow.incident_id, AlertRow.fingerprint).order_by(AlertRow.fingerprint))
    assert [tuple(a) for a in alerts] == [(ids[0], "fp-a1"), (ids[0], "fp-a2"), (ids[1], "fp-b1")]
    digests = rows(
        pg_db, select(IncidentDigestRow.incident_id, IncidentDigestRow.status).order_by(IncidentDigestRow.incident_id)
    )
    assert [tuple(d) for d in digests] == [(ids[0], "firing"), (ids[1], "resolved")]
    with session_scope(pg_db) as session:
        digest = session.get(IncidentDigestRow, ids[0])
        assert digest is not None
        assert "queue high on a" in digest.document
        assert f"instance={factories.INSTANCE}" in digest.labels


def test_an_alert_list_that_does_not_match_the_incidents_opens_nothing(pg_db: str) -> None:
    with pytest.raises(ValueError), session_scope(pg_db) as session:
        open_incidents(session, [factories.incident("g-a"), factories.incident("g-b")], [[factories.alert()]])
    assert count_rows(pg_db)["incidents"] == 0
