"""Engineers' verdicts recorded by the room (rca.incidents.feedback), on the real PostgreSQL: a
verdict the incident cannot take is a FeedbackError naming the field at fault and the reason's
code, and stores nothing; an accepted one is kept against the latest finished investigation and
becomes the incident's confirmed cause in its search digest."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from rca.domain.status import InvestigationStatus
from rca.incidents.feedback import FeedbackError, record
from rca.incidents.opened import open_incidents
from rca.store.db import session_scope
from rca.store.models import FeedbackRow, HypothesisRow, IncidentDigestRow, InvestigationRow
from tests.helpers import factories
from tests.helpers.databases import rows

CATEGORIES = ("arrival_surge", "kv_cache_pressure", "cpu_contention")


def incident(url: str, *finished: tuple[str, int]) -> tuple[int, list[int]]:
    """An incident with investigations in these statuses, each with this many ranked hypotheses."""
    with session_scope(url) as session:
        [incident_id] = open_incidents(session, [factories.incident()], [[factories.alert()]])
        investigations = []
        for status, ranked in finished:
            investigation = InvestigationRow(incident_id=incident_id, status=status, reason="new_incident", attempts=1)
            for rank, category in enumerate(CATEGORIES[:ranked], start=1):
                columns = factories.hypothesis(rank, category).to_dict()
                del columns["score"]  # the rules' score is not stored
                investigation.hypotheses.append(HypothesisRow(**columns))
            session.add(investigation)
            investigations.append(investigation)
        session.flush()
        return incident_id, [i.id for i in investigations]


def recorded(url: str, incident_id: int, category: str, verdicts: list[dict[str, Any]]) -> int:
    with session_scope(url) as session:
        row = record(
            session,
            incident_id,
            category=category,
            note="confirmed by the on-call",
            verdicts=verdicts,
            author="alice",
            categories=CATEGORIES,
        )
        session.flush()
        return row.id


@pytest.mark.parametrize(
    ("category", "verdicts", "field", "code", "words"),
    [
        ("disk_full", [], "category", "unknown_category", "not a taxonomy id"),
        (
            "arrival_surge",
            [{"rank": 1, "correct": True}, {"rank": 1, "correct": False}],
            "hypotheses",
            "duplicate_rank",
            "only once",
        ),
        ("arrival_surge", [{"rank": 3, "correct": True}], "hypotheses", "unknown_rank", "has ranks 1, 2"),
    ],
)
def test_feedback_the_incident_cannot_take_names_the_field_and_code_and_stores_nothing(
    pg_db: str, category: str, verdicts: list[dict[str, Any]], field: str, code: str, words: str
) -> None:
    incident_id, _ = incident(pg_db, (InvestigationStatus.DONE, 2))
    with pytest.raises(FeedbackError, match=words) as raised:
        recorded(pg_db, incident_id, category, verdicts)
    assert (raised.value.field, raised.value.code) == (field, code)
    assert rows(pg_db, select(FeedbackRow.id)) == []


def test_a_verdict_on_ranks_is_refused_when_no_investigation_finished(pg_db: str) -> None:
    incident_id, _ = incident(pg_db, (InvestigationStatus.FAILED, 0), (InvestigationStatus.RUNNING, 0))
    with pytest.raises(FeedbackError, match="no finished investigation") as raised:
        recorded(pg_db, incident_id, "arrival_surge", [{"rank": 1, "correct": True}])
    assert (raised.value.field, raised.value.code) == ("hypotheses", "unknown_rank")


def test_feedback_is_kept_against_the_latest_finished_investigation_and_confirms_the_cause(pg_db: str) -> None:
    incident_id, (_, latest, _) = incident(
        pg_db, (InvestigationStatus.DONE, 1), (InvestigationStatus.DONE, 2), (InvestigationStatus.FAILED, 0)
    )
    verdicts = [{"rank": 2, "correct": True}]
    feedback_id = recorded(pg_db, incident_id, "kv_cache_pressure", verdicts)
    with session_scope(pg_db) as session:
        feedback, digest = session.get(FeedbackRow, feedback_id), session.get(IncidentDigestRow, incident_id)
        assert feedback is not None and digest is not None
        assert (feedback.investigation_id, feedback.category, feedback.verdicts) == (
            latest,
            "kv_cache_pressure",
            verdicts,
        )
        assert digest.confirmed_category == "kv_cache_pressure"
    recorded(pg_db, incident_id, "arrival_surge", [])  # the newest verdict is the one that counts
    with session_scope(pg_db) as session:
        digest = session.get(IncidentDigestRow, incident_id)
        assert digest is not None and digest.confirmed_category == "arrival_surge"
