"""The one place an investigation is queued (rca.incidents.queue), on the real PostgreSQL: its one
guard, whose statuses each caller names (WAITING for new alerts, ACTIVE for a request to look again,
ALWAYS for a warning again), and the newest guarded investigation answering instead."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from rca.domain.hosts import Fleet
from rca.domain.status import AlertStatus, InvestigationStatus
from rca.incidents.opened import open_incidents
from rca.incidents.queue import (
    ACTIVE,
    ALWAYS,
    REQUESTED,
    WAITING,
    Requested,
    investigate_again,
    planned_round,
    queue,
    queue_new,
)
from rca.store.db import session_scope
from rca.store.models import AlertRow, InvestigationRow
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
        [(first,), (second,)] = queue_new(session, incidents, "new_incident")
    ids = [first, second]
    assert ids[0] < ids[1]
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


# ---- fleet incidents: a round, one investigation per host ----

FLEET = Fleet(("instance", "Hostname"))


def host_alerts(*hosts: str, status: str = AlertStatus.FIRING) -> list[dict[str, Any]]:
    """One alert of the group per host, as vLLM's `instance` names it."""
    return [
        factories.alert(f"fp-{host}", status=status, labels={"alertname": "QueueHigh", "instance": f"{host}:8000"})
        for host in hosts
    ]


def fleet_incident(url: str, alerts: list[dict[str, Any]]) -> int:
    with session_scope(url) as session:
        [incident_id] = open_incidents(session, [factories.incident()], [alerts])
        return incident_id


def rounds_of(url: str, incident_id: int) -> list[tuple[int, str | None, int | None, int | None]]:
    query = select(
        InvestigationRow.id, InvestigationRow.host, InvestigationRow.round_id, InvestigationRow.round_skipped
    )
    return [tuple(row) for row in rows(url, query.where(InvestigationRow.incident_id == incident_id).order_by("id"))]


def test_a_group_of_six_hosts_queues_one_investigation_per_host_in_one_round(pg_db: str) -> None:
    hosts = [f"gpu-node-{n}" for n in range(1, 7)]
    incident_id = fleet_incident(pg_db, host_alerts(*hosts))
    with session_scope(pg_db) as session:
        answer = queue(session, incident_id, "new_alerts", unless=WAITING, fleet=FLEET)
    found = rounds_of(pg_db, incident_id)
    assert answer.created and answer.ids == tuple(row[0] for row in found)
    assert [row[1] for row in found] == hosts
    assert {(row[2], row[3]) for row in found} == {(answer.investigation_id, 0)}


def test_new_incidents_queue_their_rounds_in_one_insert(pg_db: str) -> None:
    with session_scope(pg_db) as session:
        alerts = [host_alerts("gpu-node-1", "gpu-node-2"), host_alerts("gpu-node-3")]
        incidents = open_incidents(session, [factories.incident("g-fleet"), factories.incident("g-one")], alerts)
        rounds = [planned_round(FLEET, [(a["labels"], a["status"]) for a in group]) for group in alerts]
        fleet_round, single = queue_new(session, incidents, "new_incident", rounds)
    assert [row[1:] for row in rounds_of(pg_db, incidents[0])] == [
        ("gpu-node-1", fleet_round[0], 0),
        ("gpu-node-2", fleet_round[0], 0),
    ]
    assert rounds_of(pg_db, incidents[1]) == [(single[0], None, None, None)]


@pytest.mark.parametrize(
    "alerts",
    [
        host_alerts("gpu-node-1"),
        # the same host in two spellings and two exporters' labels: one host
        host_alerts("gpu-node-1") + [factories.alert("fp-dcgm", labels={"Hostname": "gpu-node-1.example.com"})],
        # several hosts named, but only one of them still fires
        host_alerts("gpu-node-1") + host_alerts("gpu-node-2", status=AlertStatus.RESOLVED),
    ],
)
def test_a_group_of_one_host_is_investigated_as_one_target_as_before(pg_db: str, alerts: list[dict[str, Any]]) -> None:
    incident_id = fleet_incident(pg_db, alerts)
    with session_scope(pg_db) as session:
        answer = queue(session, incident_id, "new_alerts", unless=WAITING, fleet=FLEET)
    assert rounds_of(pg_db, incident_id) == [(answer.investigation_id, None, None, None)]
    assert answer.ids == (answer.investigation_id,)


def test_beyond_the_bound_a_sample_is_investigated_the_same_each_time_and_the_rest_counted(pg_db: str) -> None:
    incident_id = fleet_incident(pg_db, host_alerts(*(f"gpu-node-{n}" for n in range(1, 6))))
    bounded = Fleet(("instance",), max_hosts=2)
    for _ in range(2):
        with session_scope(pg_db) as session:
            queue(session, incident_id, "new_alerts", unless=ALWAYS, fleet=bounded)
    first, second = rounds_of(pg_db, incident_id)[:2], rounds_of(pg_db, incident_id)[2:]
    assert [row[3] for row in first + second] == [3, 3, 3, 3]
    assert [row[1] for row in first] == [row[1] for row in second]
    assert len({row[1] for row in first}) == 2 and first[0][2] != second[0][2]


def test_investigating_a_fleet_incident_again_queues_its_whole_round_again(pg_db: str) -> None:
    incident_id = fleet_incident(pg_db, host_alerts("gpu-node-1", "gpu-node-2", "gpu-node-3"))
    with session_scope(pg_db) as session:
        first = queue(session, incident_id, "new_incident", unless=WAITING, fleet=FLEET)
        for investigation_id in first.ids:
            session.get_one(InvestigationRow, investigation_id).status = DONE
    with session_scope(pg_db) as session:
        again = investigate_again(session, incident_id, requested_by="alice", fleet=FLEET)
    assert again is not None and again.created and len(again.ids) == 3
    rerun = [row for row in rounds_of(pg_db, incident_id) if row[0] in again.ids]
    assert [(row[1], row[2]) for row in rerun] == [(f"gpu-node-{n}", again.investigation_id) for n in (1, 2, 3)]
    with session_scope(pg_db) as session:  # one of the round still queued answers a second request
        assert investigate_again(session, incident_id, fleet=FLEET) == Requested(again.ids[-1], False, QUEUED, "alice")


def test_hosts_joining_while_the_incident_waits_turn_its_investigation_into_a_round(pg_db: str) -> None:
    incident_id = fleet_incident(pg_db, host_alerts("gpu-node-1"))
    with session_scope(pg_db) as session:
        first = queue(session, incident_id, "new_incident", unless=WAITING, fleet=FLEET)
    with session_scope(pg_db) as session:  # the group's next notification names two more hosts
        session.add_all(AlertRow(incident_id=incident_id, **a) for a in host_alerts("gpu-node-2", "gpu-node-3"))
        session.flush()
        joined = queue(session, incident_id, "new_alerts", unless=WAITING, fleet=FLEET)
    assert joined.investigation_id == first.investigation_id and not joined.created
    round_id = first.investigation_id
    assert rounds_of(pg_db, incident_id) == [
        (round_id, "gpu-node-1", round_id, 0),
        (joined.ids[0], "gpu-node-2", round_id, 0),
        (joined.ids[1], "gpu-node-3", round_id, 0),
    ]
    with session_scope(pg_db) as session:  # a fourth host past a bound of three is counted, not queued
        session.add_all(AlertRow(incident_id=incident_id, **a) for a in host_alerts("gpu-node-4"))
        session.flush()
        bounded = queue(session, incident_id, "new_alerts", unless=WAITING, fleet=Fleet(("instance",), max_hosts=3))
    assert bounded.ids == ()
    assert {row[3] for row in rounds_of(pg_db, incident_id)} == {1}
