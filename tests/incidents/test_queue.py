"""The one place an investigation is queued (rca.incidents.queue), on the real PostgreSQL: its one
guard, whose statuses each caller names (WAITING for new alerts, ACTIVE for a request to look again,
ALWAYS for a warning again), and the newest guarded investigation answering instead."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from rca.domain.status import InvestigationStatus
from rca.incidents.opened import open_incidents
from rca.incidents.queue import ACTIVE, ALWAYS, REQUESTED, WAITING, Requested, investigate_again, queue, queue_new
from rca.store.db import session_scope
from rca.store.models import InvestigationRow
from tests.helpers import factories
from tests.helpers.databases import rows

QUEUED, RUNNING, DONE = InvestigationStatus.QUEUED, InvestigationStatus.RUNNING, InvestigationStatus.DONE


def incident_with(url: str, *statuses: str) -> tuple[int, list[int]]:
    """An incident with investigations in these statuses, oldest first; its id and theirs."""
    with session_scope(url) as session:
        [incident_id] = open_incidents(session, [factories.incident()], [[factories.alert()]])
        investigations = [
            InvestigationRow(incident_id=incident_id, status=status, reason="new_incident", attempts=0)
            for status in statuses
        ]
        session.add_all(investigations)
        session.flush()
        return incident_id, [i.id for i in investigations]


def investigations_of(url: str, incident_id: int) -> list[tuple[str, str]]:
    query = select(InvestigationRow.status, InvestigationRow.reason).where(InvestigationRow.incident_id == incident_id)
    return [tuple(row) for row in rows(url, query.order_by(InvestigationRow.id))]


def queued(url: str, incident_id: int, unless: tuple[str, ...]) -> Requested:
    with session_scope(url) as session:
        return queue(session, incident_id, "new_alerts", unless=unless)


@pytest.mark.parametrize(
    ("unless", "statuses", "answered_by"),
    [
        (WAITING, (DONE, QUEUED), 1),  # a queued one will see the new alerts
        (ACTIVE, (QUEUED,), 0),
        (ACTIVE, (DONE, RUNNING), 1),  # one running answers a request to look again
        (ACTIVE, (QUEUED, QUEUED), 1),  # the newest answers
    ],
)
def test_a_guarded_status_answers_instead_of_a_new_investigation(
    pg_db: str, unless: tuple[str, ...], statuses: tuple[str, ...], answered_by: int
) -> None:
    incident_id, ids = incident_with(pg_db, *statuses)
    answer = queued(pg_db, incident_id, unless)
    assert answer == Requested(ids[answered_by], False, statuses[answered_by], None)
    assert len(investigations_of(pg_db, incident_id)) == len(statuses)


@pytest.mark.parametrize(
    ("unless", "statuses"),
    [
        (WAITING, ()),
        (WAITING, (RUNNING, DONE)),  # a running one may not have seen the new alerts
        (ACTIVE, (DONE,)),
        (ALWAYS, (QUEUED, RUNNING)),  # a warning again is investigated on its own
    ],
)
def test_otherwise_an_investigation_is_queued_beside_the_others(
    pg_db: str, unless: tuple[str, ...], statuses: tuple[str, ...]
) -> None:
    incident_id, ids = incident_with(pg_db, *statuses)
    answer = queued(pg_db, incident_id, unless)
    assert answer.created and answer.status == QUEUED and answer.investigation_id not in ids
    assert investigations_of(pg_db, incident_id)[-1] == (QUEUED, "new_alerts")
    assert len(investigations_of(pg_db, incident_id)) == len(statuses) + 1


def test_incidents_opened_now_get_one_queued_investigation_each(pg_db: str) -> None:
    with session_scope(pg_db) as session:
        incidents = open_incidents(
            session,
            [factories.incident("g-a"), factories.incident("g-b")],
            [[factories.alert()], [factories.alert()]],
        )
        ids = queue_new(session, incidents, "new_incident")
    assert len(ids) == 2 and ids[0] < ids[1]
    query = select(
        InvestigationRow.id, InvestigationRow.incident_id, InvestigationRow.status, InvestigationRow.attempts
    )
    assert [tuple(r) for r in rows(pg_db, query.order_by(InvestigationRow.id))] == [
        (ids[0], incidents[0], QUEUED, 0),
        (ids[1], incidents[1], QUEUED, 0),
    ]


def test_investigating_again_records_who_asked_and_a_second_request_gets_the_first(pg_db: str) -> None:
    incident_id, _ = incident_with(pg_db, DONE)
    with session_scope(pg_db) as session:
        first = investigate_again(session, incident_id, requested_by="alice")
    with session_scope(pg_db) as session:
        second = investigate_again(session, incident_id, requested_by="bob")
    assert first is not None and first.created and first.requested_by == "alice"
    assert second == Requested(first.investigation_id, False, QUEUED, "alice")
    assert investigations_of(pg_db, incident_id) == [(DONE, "new_incident"), (QUEUED, REQUESTED)]


def test_investigating_again_an_incident_that_does_not_exist_queues_nothing(pg_db: str) -> None:
    with session_scope(pg_db) as session:
        assert investigate_again(session, 12345) is None
    assert rows(pg_db, select(InvestigationRow.id)) == []
