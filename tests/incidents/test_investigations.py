"""An investigation's end as its incident sees it (rca.incidents.investigations), on the real
PostgreSQL: a finished one's incident owes Slack its notice and has its digest rewritten in the same
transaction; a failed one owes the notice that says so; a late failure of a finished one changes
nothing; the sweep owes a notice for each incident it gave up on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from rca.domain.result import InvestigationResult
from rca.domain.series import EvidenceSeries
from rca.incidents import investigations
from rca.store.db import session_scope
from rca.store.models import EvidenceSeriesRow, IncidentDigestRow, InvestigationRow
from tests.helpers import factories
from tests.helpers.databases import rows
from tests.helpers.slack import queued_investigation, slack_owed

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def result() -> InvestigationResult:
    return InvestigationResult(
        findings=[factories.finding("queue_median")],
        hypotheses=[factories.hypothesis(1, "arrival_surge", evidence=["queue_median"])],
        analyst=None,
        window_start=NOW - timedelta(hours=3),
        window_end=NOW,
        step_seconds=15,
        target={"host": "gpu-node-1", "labels": {}},
        error=None,
        collect_seconds=0.1,
        total_seconds=0.2,
        change_key="k",
    )


def claimed(url: str) -> tuple[int, int]:
    """A queued investigation, claimed as a runner claims it; its id and its incident's."""
    investigation_id = queued_investigation(url)
    with session_scope(url) as session:
        claim = investigations.claim(session, investigation_id, lease=timedelta(minutes=5))
        assert claim is not None
        return investigation_id, claim.incident_id


def test_a_finished_investigation_owes_slack_and_rewrites_the_digest_with_its_cause(pg_db: str) -> None:
    investigation_id, incident_id = claimed(pg_db)
    series = EvidenceSeries("queue_median", {"pod": "p"}, NOW - timedelta(minutes=1), 15, [4.0, 5.0, None, 5.5], None)
    with session_scope(pg_db) as session:
        investigations.finish(session, investigation_id, result(), [series], owe_slack=True)
    with session_scope(pg_db) as session:
        inv = session.get(InvestigationRow, investigation_id)
        digest = session.get(IncidentDigestRow, incident_id)
        assert inv is not None and inv.status == "done" and inv.lease_until is None
        assert digest is not None and (digest.top_category, digest.breached) == ("arrival_surge", ["queue_median"])
    assert slack_owed(pg_db, incident_id)[0] == 1
    [kept] = rows(pg_db, select(EvidenceSeriesRow.investigation_id))
    assert kept.investigation_id == investigation_id


def test_without_slack_a_finished_investigation_owes_nothing_but_is_still_searchable(pg_db: str) -> None:
    investigation_id, incident_id = claimed(pg_db)
    with session_scope(pg_db) as session:
        investigations.finish(session, investigation_id, result(), [], owe_slack=False)
    assert slack_owed(pg_db, incident_id) == (0, None)
    with session_scope(pg_db) as session:
        digest = session.get(IncidentDigestRow, incident_id)
        assert digest is not None and digest.top_category == "arrival_surge"


def test_a_failure_owes_the_notice_that_says_so_and_a_late_one_changes_nothing(pg_db: str) -> None:
    investigation_id, incident_id = claimed(pg_db)
    with session_scope(pg_db) as session:
        assert investigations.fail(session, investigation_id, "ValueError: bad data", owe_slack=True) is True
    assert slack_owed(pg_db, incident_id)[0] == 1
    with session_scope(pg_db) as session:
        assert investigations.fail(session, investigation_id, "late", owe_slack=True) is False
        inv = session.get(InvestigationRow, investigation_id)
        assert inv is not None and (inv.status, inv.error) == ("failed", "ValueError: bad data")
    assert slack_owed(pg_db, incident_id)[0] == 1  # nothing new to say


def test_the_sweep_owes_a_notice_for_each_incident_it_gave_up_on(pg_db: str) -> None:
    investigation_id, incident_id = claimed(pg_db)
    with session_scope(pg_db) as session:
        investigations.renew_lease(session, investigation_id, timedelta(seconds=-1))  # its worker died
        found = investigations.stranded(session, timedelta(seconds=60), 1, owe_slack=True)
    assert (found.requeued, found.gave_up) == ([], [incident_id])
    assert slack_owed(pg_db, incident_id)[0] == 1
