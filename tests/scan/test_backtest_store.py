"""`rca backtest --store` on PostgreSQL: a replay's warnings kept as resolved incidents of origin
`backtest` with their transitions, stored once however often the replay is stored, found by the
API's `origin=backtest` and shown like a live warning on their page, while the live scan's state
and incidents stay as they were and Slack hears nothing of them."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from rca.jobs.slack import queue_notice_of
from rca.notify.service import deliver
from rca.pages.site import create_site
from rca.scan.backtest import Frame, replay
from rca.scan.fleet import ServingInstance
from rca.scan.states import Assessment, ScanState, TargetMemory, Transition
from rca.scan.stored import Stored, store, store_all
from rca.scan.warnings import Actions, record
from rca.store import early_warnings, notices
from rca.store.db import session_scope
from rca.store.models import AlertRow, IncidentRow, ScanTargetRow, ScanTransitionRow
from tests.fakes.slack import FakeSlack
from tests.helpers.service import API_AUTH, RecordingDispatcher
from tests.helpers.slack import slack_owed, slack_settings, store_investigation
from tests.scan.test_replay import CPU, POLICY, TTFT, signal

T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC: the first scan of the replayed history
SCANS = 22
# a: the CPU-bound ratio crosses at scan 4 (watch), warns at scan 6, calms at 12, clears at 16, ok at 20.
# b: crosses at scan 4 and is still warning when the history ends.
CPU_OF = {"a:8000": [0.5] * 4 + [0.9] * 8 + [0.5] * 10, "b:8000": [0.5] * 4 + [0.9] * 18}
TARGETS = {i: ServingInstance(i, i.split(":")[0], i.split(":")[0], "vllm", "vllm_v1") for i in CPU_OF}


def history(scans: int = SCANS) -> list[Frame]:
    """A scan every 30 s from T0; TTFT stays well within its SLO."""
    return [
        Frame(
            T0 + 30 * i,
            {
                instance: Assessment(at=T0 + 30 * i, signals=[signal(CPU, cpu[i]), signal(TTFT, 0.3)])
                for instance, cpu in CPU_OF.items()
            },
            TARGETS,
        )
        for i in range(scans)
    ]


def stored(url: str, only: str | None = None) -> Stored:
    with session_scope(url) as session:
        return store(session, replay(history(), POLICY, only), POLICY)


def live_warning(url: str) -> int:
    """The live scan's own warning for a:8000, stored as the scan stores it (its scan_targets row too)."""
    assessment = Assessment(at=T0 + 7200, signals=[signal(CPU, 0.95), signal(TTFT, 0.3)])
    transition = Transition(ScanState.WATCH, ScanState.WARNING, assessment.at, "live", {"signals": []})
    with session_scope(url) as session:
        memory = record(
            session,
            TARGETS["a:8000"],
            transition,
            TargetMemory(),
            assessment,
            POLICY,
            owe_slack=True,
            actions=Actions(),
        )
    assert memory.incident_id is not None
    return memory.incident_id


def snapshot(url: str, incident_id: int) -> tuple[object, ...]:
    """The live scan's rows: its target state and its incident with its alert."""
    with session_scope(url) as session:
        target = session.scalars(select(ScanTargetRow)).one()
        incident = session.get(IncidentRow, incident_id)
        assert incident is not None
        return (
            [(t.instance, t.state, t.since, t.incident_id, t.updated_at) for t in [target]],
            (incident.status, incident.updated_at, incident.resolved_at, incident.slack_owed, incident.group_key),
            [(a.fingerprint, a.status, a.starts_at, a.ends_at) for a in incident.alerts],
        )


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def test_each_warning_is_stored_once_as_a_resolved_backtest_incident_with_its_transitions(pg_db: str) -> None:
    live = live_warning(pg_db)
    before = snapshot(pg_db, live)

    first = stored(pg_db, only="a:8000")
    assert len(first.incident_ids) == 1 and first.already_stored == 0
    again = stored(pg_db, only="a:8000")
    assert again == Stored([], 1), "the same history stored again adds nothing"
    wider = stored(pg_db)  # the whole fleet: only b's warning is new
    assert len(wider.incident_ids) == 1 and wider.already_stored == 1
    a_id, b_id = first.incident_ids[0], wider.incident_ids[0]

    with session_scope(pg_db) as session:
        a, b = session.get(IncidentRow, a_id), session.get(IncidentRow, b_id)
        assert a is not None and b is not None
        assert (a.origin, a.status, a.group_key) == ("backtest", "resolved", "backtest/a:8000/2027-01-15T08:03:00Z")
        assert a.title == "Backtest warning: a:8000" and a.created_at == utc(T0 + 180)
        assert a.resolved_at == utc(T0 + 480)  # when it cleared
        [alert] = a.alerts
        assert (alert.alertname, alert.status, alert.starts_at, alert.ends_at) == (
            "EarlyWarning",
            "resolved",
            utc(T0 + 180),
            utc(T0 + 480),
        )
        assert alert.labels == {
            "alertname": "EarlyWarning",
            "instance": "a:8000",
            "host": "a",
            "severity": "warning",
            "job": "vllm",
            "backtest": "true",
        }
        # The live scan's words, from the assessment it warned on.
        summary = a.common_annotations["summary"]
        assert (
            summary.startswith("Early warning, before the TTFT SLO breaks: CPU-bound ratio") and "still" not in summary
        )
        assert b.resolved_at == utc(T0 + 30 * (SCANS - 1))  # still warning: resolved at the replay's end
        assert b.common_annotations["summary"].endswith(
            "; still warning when the backtest ended at 2027-01-15 08:10 UTC"
        )

        moves = [
            (t.before, t.after, t.at, bool(t.reason), bool(t.figures["signals"]))
            for t in early_warnings.transitions(session, a_id)
        ]
        assert moves == [
            ("ok", "watch", utc(T0 + 120), True, True),
            ("watch", "warning", utc(T0 + 180), True, True),
            ("warning", "cleared", utc(T0 + 480), True, True),
            ("cleared", "ok", utc(T0 + 600), True, True),
        ]
        assert [(t.before, t.after) for t in early_warnings.transitions(session, b_id)] == [
            ("ok", "watch"),
            ("watch", "warning"),
        ]
        unowned = session.scalars(select(ScanTransitionRow).where(ScanTransitionRow.incident_id.is_(None))).all()
        assert unowned == [], "every stored transition belongs to its episode's incident"

        # An Alertmanager notification never joins a backtest incident, by fingerprint or by target.
        fingerprint = session.scalars(select(AlertRow.fingerprint).where(AlertRow.incident_id == b_id)).one()
        named = early_warnings.Named(fingerprints=[fingerprint], instances=["b:8000"], hosts=["b"])
        assert early_warnings.joined_incidents(session, [named]) == [None]
    assert snapshot(pg_db, live) == before, "the live scan's target state and incident are untouched"


def test_a_backtest_incident_is_searchable_shown_as_a_warning_and_never_reaches_slack(
    pg_db: str, tmp_path: Path
) -> None:
    live = live_warning(pg_db)
    [a_id, b_id] = stored(pg_db).incident_ids
    with FakeSlack() as slack:
        settings = slack_settings(pg_db, tmp_path, slack)
        with TestClient(create_site(settings, dispatcher=RecordingDispatcher())) as client:
            for origin, expected in (("backtest", {a_id, b_id}), ("early_warning", {live})):
                items = client.get("/api/v1/incidents", params={"origin": origin}, headers=API_AUTH).json()["items"]
                assert {item["id"] for item in items} == expected, origin
                assert {item["origin"] for item in items} == {origin}
            since = (utc(T0) - timedelta(minutes=1)).isoformat()
            until = (utc(T0) + timedelta(hours=1)).isoformat()
            items = client.get("/api/v1/incidents", params={"since": since, "until": until}, headers=API_AUTH)
            assert {i["id"] for i in items.json()["items"]} == {a_id, b_id}, "placed when they would have warned"

            page = client.get(f"/incidents/{a_id}", headers=API_AUTH).text
            header = page.split('id="early-warning"')[1].split("</div>")[0]
            assert "<b>Backtest</b>" in header and "never posted to Slack" in header
            assert 'data-signal="cpu_bound_ratio"' in header  # the figures of the move to warning
            timeline = page.split('id="timeline"')[1].split("</section>")[0]
            for event in ("backtest: the scan would warn", "scan: watch → warning", "scan: warning → cleared"):
                assert f"<b>{event}</b>" in timeline, event
            listed = client.get("/", params={"origin": "backtest"}, headers=API_AUTH).text
            assert f'data-incident="{a_id}"' in listed and f'data-incident="{live}"' not in listed

        # Even with a finished investigation, which would post a live incident: nothing owed,
        # nothing queued, nothing sent.
        investigation = store_investigation(pg_db, a_id, ["cpu_bound_ratio"], ["cpu_launch_overhead"])
        with session_scope(pg_db) as session:
            notices.owe(session, a_id)
        assert slack_owed(pg_db, a_id) == (0, None)
        queued: list[tuple[int, str]] = []
        queue_notice_of(settings, investigation, lambda incident, event: queued.append((incident, event)) or True)
        assert queued == []
        outcome = deliver(settings, a_id, "investigation")
        assert outcome.status == "skipped" and "backtest" in outcome.detail
        assert slack.arrived == 0

        # The live warning, the same way, is posted: the skip is the origin's, not the setup's.
        live_investigation = store_investigation(pg_db, live, ["cpu_bound_ratio"], ["cpu_launch_overhead"])
        queue_notice_of(settings, live_investigation, lambda incident, event: queued.append((incident, event)) or True)
        assert queued == [(live, "investigation")]
        assert deliver(settings, live, "investigation").status == "delivered" and slack.arrived > 0


def test_a_store_that_fails_midway_stores_nothing(pg_db: str) -> None:
    frames = [Frame(f.at, f.assessments, {"a:8000": TARGETS["a:8000"]}) for f in history()]  # b's target unknown
    result = replay(frames, POLICY)
    assert [w.instance for w in result.warnings] == ["a:8000", "b:8000"]
    with pytest.raises(ValueError, match="b:8000"), session_scope(pg_db) as session:
        store(session, result, POLICY)
    with session_scope(pg_db) as session:
        assert (
            session.scalars(select(IncidentRow)).all() == [] and session.scalars(select(ScanTransitionRow)).all() == []
        )


def test_two_runs_storing_the_same_history_at_once_store_each_episode_once(pg_db: str) -> None:
    """The second run's insert waits on the first's uncommitted one (the unique index on a
    backtest's group key), fails when the first commits, and the run stores again: it then finds
    both episodes and skips them."""
    result = replay(history(), POLICY)
    with ThreadPoolExecutor(max_workers=1) as pool, session_scope(pg_db) as first:
        first_stored = store(first, result, POLICY)  # flushed, not committed: the rows are taken
        second = pool.submit(store_all, pg_db, result, POLICY)
        time.sleep(1.0)
        assert not second.done(), "the second run waits on the first's uncommitted episodes"
    assert len(first_stored.incident_ids) == 2  # committed as the `with` ends
    assert second.result(timeout=30) == Stored([], 2)
    with session_scope(pg_db) as session:
        keys = session.scalars(select(IncidentRow.group_key).where(IncidentRow.origin == "backtest")).all()
    assert sorted(keys) == ["backtest/a:8000/2027-01-15T08:03:00Z", "backtest/b:8000/2027-01-15T08:03:00Z"]
