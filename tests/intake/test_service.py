"""Storing several notifications in one transaction (`record_notifications`, as the webhook batches
them under load) ends exactly where storing them one at a time does: the same incidents, alerts,
notifications, investigations, search digests and Slack debts, and the same answer to each
notification. On PostgreSQL and on the embedded SQLite store."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, select

from rca.domain.status import InvestigationStatus
from rca.incidents.queue import Requested, investigate_again
from rca.intake.limits import IntakeLimits
from rca.intake.schema import WebhookPayload
from rca.intake.service import IntakeResult, Notice, record_notification, record_notifications
from rca.scan.fleet import ServingInstance
from rca.scan.states import Assessment, Policy, ScanState, TargetMemory, Transition
from rca.scan.warnings import Actions, record
from rca.store.db import session_scope
from rca.store.models import (
    AlertRow,
    IncidentDigestRow,
    IncidentRow,
    InvestigationRow,
    NotificationRow,
    ScanTargetRow,
    ScanTransitionRow,
)
from tests.helpers.databases import truncate
from tests.helpers.payloads import make_alert, make_payload
from tests.helpers.service import make_settings

WARNED = ServingInstance("gpu-node-9:8000", "gpu-node-9", "gpu-node-9", "vllm", "vllm_v1")


def notice(url: str, payload: dict[str, Any]) -> Notice:
    limits = IntakeLimits.from_settings(make_settings(url, Path("/unused"))).context()
    return Notice(WebhookPayload.model_validate(payload, context=limits), payload)


def group(name: str) -> str:
    return f'{{}}:{{alertname="QueueHigh",group="{name}"}}'


def earlier() -> list[dict[str, Any]]:
    """What came before the batch: an open group, a closed one, and a group whose investigation ran."""
    return [
        make_payload(group("open"), alerts=[make_alert("fp-open")]),
        make_payload(group("closed"), alerts=[make_alert("fp-closed")]),
        make_payload(group("closed"), alerts=[make_alert("fp-closed", status="resolved")]),
        make_payload(group("ran"), alerts=[make_alert("fp-ran")]),
    ]


def before_the_batch(url: str, payloads: list[dict[str, Any]]) -> None:
    """What the database holds when the batch arrives: the earlier notifications, the investigation
    of group "ran" done, and the scan's warning for gpu-node-9."""
    with session_scope(url) as session:
        for payload in payloads:
            record_notification(session, notice(url, payload).payload, payload)
        session.execute(
            InvestigationRow.__table__.update()
            .where(
                InvestigationRow.incident_id.in_(select(IncidentRow.id).where(IncidentRow.group_key == group("ran")))
            )
            .values(status="done", finished_at=datetime.now(UTC))
        )
        transition = Transition(ScanState.WATCH, ScanState.WARNING, 1_800_000_000.0, "watch to warning", {})
        record(
            session,
            WARNED,
            transition,
            TargetMemory(),
            Assessment(at=1_800_000_000.0, signals=[]),
            Policy(),
            owe_slack=False,
            actions=Actions(),
        )


def the_batch() -> list[dict[str, Any]]:
    """Every way a notification folds in, several groups more than once, in the order they came."""
    changed = make_alert("fp-open") | {"annotations": {"summary": "searchable now"}}
    return [
        make_payload(group("a"), alerts=[make_alert("fp-a1")]),  # a new group
        make_payload(group("open"), alerts=[make_alert("fp-open")]),  # a plain re-send
        make_payload(group("b"), alerts=[make_alert("fp-b1"), make_alert("fp-b2", instance="gpu-node-2:8000")]),
        make_payload(group("a"), alerts=[make_alert("fp-a1")]),  # the new group again, in the same batch
        make_payload(group("a"), alerts=[make_alert("fp-a1"), make_alert("fp-a2")]),  # ... with a new alert
        make_payload(group("open"), alerts=[changed]),  # new annotations: the digest is rewritten
        make_payload(group("never"), alerts=[make_alert("fp-never", status="resolved")]),  # resolved, never seen
        make_payload(group("closed"), alerts=[make_alert("fp-closed", status="resolved")]),  # a late resolve
        make_payload(group("ran"), alerts=[make_alert("fp-ran"), make_alert("fp-ran2")]),  # new alert after a run
        make_payload(
            group("b"), alerts=[make_alert("fp-b1", status="resolved"), make_alert("fp-b2", status="resolved")]
        ),
        make_payload(group("b"), alerts=[make_alert("fp-b1")]),  # firing again: a new incident
        make_payload(group("sla-1"), alerts=[make_alert("fp-sla-1", instance="gpu-node-9:8000")]),  # joins the warning
        make_payload(group("sla-2"), alerts=[make_alert("fp-sla-2", instance="gpu-node-9:8000")]),  # ... so does this
        make_payload(group("sla-1"), alerts=[make_alert("fp-sla-1", instance="gpu-node-9:8000")]),
        make_payload(group("c"), alerts=[make_alert("fp-c", instance="gpu-node-3:8000")]),
    ]


def state(url: str) -> dict[str, Any]:
    """Everything intake wrote, with each incident named by its group and its place among the
    group's incidents instead of by id (the batch stores new groups first, so ids differ)."""
    with session_scope(url) as session:
        incidents = list(session.scalars(select(IncidentRow).order_by(IncidentRow.id)))
        seen: dict[str, int] = {}
        names: dict[int, tuple[str, int]] = {}
        for incident in incidents:
            seen[incident.group_key] = seen.get(incident.group_key, 0) + 1
            names[incident.id] = (incident.group_key, seen[incident.group_key])

        def rows(model: Any, *columns: str) -> list[tuple[Any, ...]]:
            found = session.scalars(select(model)).all()
            return sorted(
                (names[row.incident_id], *(repr(getattr(row, column)) for column in columns)) for row in found
            )

        return {
            "incidents": sorted(
                (
                    names[i.id],
                    i.status,
                    i.title,
                    i.origin,
                    i.notification_count,
                    repr(i.common_labels),
                    repr(i.common_annotations),
                    i.resolved_at is None,
                    i.slack_owed,
                )
                for i in incidents
            ),
            "alerts": rows(AlertRow, "fingerprint", "status", "labels", "annotations", "raw"),
            "notifications": rows(NotificationRow, "status", "payload"),
            "investigations": rows(InvestigationRow, "status", "reason", "attempts"),
            "digests": rows(IncidentDigestRow, "status", "document", "labels"),
        }, names


def answers(results: list[IntakeResult], names: dict[int, tuple[str, int]]) -> list[tuple[Any, ...]]:
    return [(names[r.incident_id], r.created, r.investigation_id is not None, r.resolved_now) for r in results]


@pytest.fixture
def fresh(db_url: str) -> Iterator[Callable[[], None]]:
    """Empties the database, the scan's targets too (they outlive the incidents they point at)."""

    def empty() -> None:
        truncate(db_url)
        with session_scope(db_url) as session:
            session.execute(delete(ScanTransitionRow))
            session.execute(delete(ScanTargetRow))

    empty()
    yield empty
    empty()


@pytest.mark.parametrize("owe_slack", [False, True], ids=["no-slack", "slack"])
def test_a_batch_in_one_transaction_ends_where_one_at_a_time_does(
    db_url: str, fresh: Callable[[], None], owe_slack: bool
) -> None:
    payloads, history = the_batch(), earlier()

    before_the_batch(db_url, history)
    one_at_a_time = []
    for payload in payloads:
        with session_scope(db_url) as session:
            one_at_a_time.append(
                record_notification(session, notice(db_url, payload).payload, payload, owe_slack=owe_slack)
            )
    alone, alone_names = state(db_url)

    fresh()
    before_the_batch(db_url, history)
    with session_scope(db_url) as session:
        together = record_notifications(session, [notice(db_url, p) for p in payloads], owe_slack=owe_slack)
    batched, batched_names = state(db_url)

    assert batched == alone
    assert answers(together, batched_names) == answers(one_at_a_time, alone_names)
    # the scenario covers what it says: new groups, a re-send, joins, resolves, a reopened group
    created = [a for a in answers(together, batched_names) if a[1]]
    assert len(created) == 5, created  # a, b, never, b again, c
    assert sum(a[3] for a in answers(together, batched_names)) == 1  # b resolved
    warning = [name for name in batched_names.values() if name[0].startswith("early_warning")]
    assert len(warning) == 1
    assert sum(1 for row in batched["alerts"] if row[0] == warning[0]) == 3  # its own and both SLA alerts


def test_an_incident_is_investigated_again_once_firing_or_resolved_and_an_active_one_answers(
    db_url: str, fresh: Callable[[], None]
) -> None:
    """Asked for (the API, the page, the CLI) or `rca demo` run again: a new investigation beside the
    earlier ones, unless one is queued or running, which answers instead of another piling up."""
    before_the_batch(db_url, earlier())

    def finish(investigation_id: int, status: str = "done") -> None:
        with session_scope(db_url) as session:
            session.get_one(InvestigationRow, investigation_id).status = status

    with session_scope(db_url) as session:
        ran, closed = (
            session.scalar(
                select(IncidentRow.id).where(IncidentRow.group_key == group(name)).order_by(IncidentRow.id.desc())
            )
            for name in ("ran", "closed")
        )
        again = investigate_again(session, ran, requested_by="alice")
        assert again is not None and again.created and again.status == "queued" and again.requested_by == "alice"
        repeated = investigate_again(session, ran, requested_by="bob")
        assert repeated == Requested(again.investigation_id, False, "queued", "alice"), "the one waiting, not another"
        waiting = investigate_again(session, closed)  # resolved, its first investigation still queued
        assert waiting is not None and not waiting.created
        assert investigate_again(session, 10_000_000) is None
    finish(again.investigation_id, "running")
    with session_scope(db_url) as session:
        running = investigate_again(session, ran, requested_by="bob")
        assert running == Requested(again.investigation_id, False, "running", "alice"), "the running one answers"
        # `rca demo` queues one beside a running one (a killed earlier run's, maybe)
        beside = investigate_again(session, ran, reason="rerun", unless=[InvestigationStatus.QUEUED])
        assert beside is not None and beside.created
    finish(waiting.investigation_id)
    with session_scope(db_url) as session:
        resolved = investigate_again(session, closed, requested_by="carol")
        assert resolved is not None and resolved.created, "a resolved incident is investigated again too"
        assert session.get_one(IncidentRow, closed).status == "resolved", "and stays resolved"
    with session_scope(db_url) as session:
        runs = session.execute(
            select(
                InvestigationRow.incident_id,
                InvestigationRow.status,
                InvestigationRow.reason,
                InvestigationRow.requested_by,
            )
            .where(InvestigationRow.incident_id.in_([ran, closed]))
            .order_by(InvestigationRow.id)
        ).all()
    assert [tuple(row) for row in runs] == [
        (closed, "done", "new_incident", None),
        (ran, "done", "new_incident", None),
        (ran, "running", "requested", "alice"),
        (ran, "queued", "rerun", None),
        (closed, "queued", "requested", "carol"),
    ]


def test_requests_at_once_queue_one_investigation(db_url: str) -> None:
    """A double click, two engineers at once: eight threads ask for the same incident together; one
    investigation is queued and every other request gets it (PostgreSQL locks the incident's row;
    SQLite, which has no row locks, serializes them on its write lock)."""
    payload = make_payload(group("race"), alerts=[make_alert("fp-race")])
    with session_scope(db_url) as session:
        stored = record_notification(session, WebhookPayload.model_validate(payload), payload)
        assert stored.investigation_id is not None
        session.get_one(InvestigationRow, stored.investigation_id).status = "done"
    barrier = threading.Barrier(8)
    answers: list[Requested | None] = []

    def ask() -> None:
        barrier.wait()
        with session_scope(db_url) as session:
            answers.append(investigate_again(session, stored.incident_id, requested_by="someone"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(answers) == 8, "a request failed"
    assert sum(1 for a in answers if a is not None and a.created) == 1
    assert len({a.investigation_id for a in answers if a is not None}) == 1
    with session_scope(db_url) as session:
        ids = session.scalars(
            select(InvestigationRow.id).where(InvestigationRow.incident_id == stored.incident_id)
        ).all()
    assert len(ids) == 2
