"""`POST /api/v1/alertmanager`: what gets stored, how notifications of one alert group fold into
one incident, and what is refused (with nothing stored). Intake runs on PostgreSQL and on the
embedded SQLite store; the dispatcher only records, so investigations stay `queued` unless a
test changes them."""

from __future__ import annotations

import base64
import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from rca.api.app import create_app
from rca.store.models import Alert, Incident, Investigation, Notification
from tests.helpers.databases import CLOSED_PORT_DATABASE_URL, count_for, count_rows, investigation_rows, rows
from tests.helpers.errors import only_error
from tests.helpers.payloads import make_alert, make_payload, post_webhook, sample_payload
from tests.helpers.service import WEBHOOK_AUTH, WEBHOOK_TOKEN, LiveServer, RecordingDispatcher, make_settings

NOTHING = {"hypotheses": 0, "findings": 0, "notifications": 0, "alerts": 0, "investigations": 0, "incidents": 0}


def incident_row(url: str, incident_id: int) -> Any:
    [row] = rows(url, select(Incident.__table__).where(Incident.id == incident_id))
    return row


def finish_investigations(url: str) -> None:
    """Pretend the worker finished whatever is queued, so a new alert may ask for another run."""
    from rca.store.db import get_engine

    with get_engine(url).begin() as conn:
        conn.execute(update(Investigation).values(status="done", finished_at=datetime.now(UTC)))


# --------------------------------------------------------------------------- accepted notifications


def test_valid_notification_is_stored_with_its_raw_payload_and_one_queued_investigation(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    payload = sample_payload()

    reply = post_webhook(intake_client, payload)

    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["created"] is True and body["enqueued"] is True
    assert recorder.enqueued == [body["investigation_id"]]
    assert count_rows(db_url) | {"findings": 0, "hypotheses": 0} == {
        **NOTHING,
        "incidents": 1,
        "alerts": 1,
        "notifications": 1,
        "investigations": 1,
    }

    incident = incident_row(db_url, body["incident_id"])
    assert incident.group_key == payload["groupKey"]
    assert incident.status == "firing" and incident.resolved_at is None
    assert incident.alertname == "LLMRequestQueueMedianHigh"
    assert incident.notification_count == 1
    assert incident.common_labels == payload["commonLabels"]

    [alert] = rows(db_url, select(Alert.__table__))
    assert alert.fingerprint == payload["alerts"][0]["fingerprint"]
    assert alert.raw == payload["alerts"][0]  # verbatim, including Go's zero endsAt
    assert alert.ends_at is None
    assert alert.labels["model_name"] == "meta-llama/Llama-3.1-8B-Instruct"

    [notification] = rows(db_url, select(Notification.__table__))
    assert notification.payload == payload and notification.incident_id == body["incident_id"]

    [inv] = investigation_rows(db_url)
    assert (inv.id, inv.status, inv.reason, inv.incident_id) == (
        body["investigation_id"],
        "queued",
        "new_incident",
        body["incident_id"],
    )


def test_resent_alert_updates_the_same_incident_without_a_new_investigation(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    payload = make_payload(alerts=[make_alert("fp-a")])
    first = post_webhook(intake_client, payload).json()
    finish_investigations(db_url)  # even when nothing is pending, a re-send asks for nothing

    again = post_webhook(intake_client, payload)

    assert again.status_code == 200, again.text
    assert again.json() == {
        "incident_id": first["incident_id"],
        "created": False,
        "investigation_id": None,
        "enqueued": False,
    }
    assert recorder.enqueued == [first["investigation_id"]]
    counts = count_rows(db_url)
    assert (counts["incidents"], counts["alerts"], counts["notifications"], counts["investigations"]) == (1, 1, 2, 1)
    assert incident_row(db_url, first["incident_id"]).notification_count == 2


def test_new_alert_in_the_group_joins_the_incident_and_waits_for_the_queued_investigation(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    group = '{}:{alertname="KVCacheHigh"}'
    first = post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a")])).json()

    second = post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a"), make_alert("fp-b")]))

    assert second.status_code == 200, second.text
    assert second.json()["incident_id"] == first["incident_id"]
    assert second.json()["investigation_id"] is None  # the queued one will see both alerts
    assert recorder.enqueued == [first["investigation_id"]]
    assert count_for(db_url, Alert, incident_id=first["incident_id"]) == 2
    assert count_rows(db_url)["investigations"] == 1


def test_new_alert_in_the_group_after_the_investigation_ran_queues_exactly_one_new_investigation(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    group = '{}:{alertname="KVCacheHigh"}'
    first = post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a")])).json()
    finish_investigations(db_url)

    second = post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a"), make_alert("fp-b")]))
    third = post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a"), make_alert("fp-b")]))

    assert second.status_code == 200 and third.status_code == 200
    assert second.json()["incident_id"] == first["incident_id"] == third.json()["incident_id"]
    new_id = second.json()["investigation_id"]
    assert new_id is not None and new_id != first["investigation_id"]
    assert third.json()["investigation_id"] is None
    assert recorder.enqueued == [first["investigation_id"], new_id]
    invs = investigation_rows(db_url)
    assert [(i.id, i.status, i.reason) for i in invs] == [
        (first["investigation_id"], "done", "new_incident"),
        (new_id, "queued", "new_alerts"),
    ]


def test_alert_that_fires_again_within_an_open_incident_queues_a_new_investigation(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    group = '{}:{alertname="KVCacheHigh"}'
    first = post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a"), make_alert("fp-b")])).json()
    finish_investigations(db_url)
    post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a", status="resolved"), make_alert("fp-b")]))
    assert len(recorder.enqueued) == 1

    refired = post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a"), make_alert("fp-b")]))

    assert refired.json()["incident_id"] == first["incident_id"]
    assert refired.json()["investigation_id"] is not None
    assert len(recorder.enqueued) == 2
    assert incident_row(db_url, first["incident_id"]).status == "firing"


def test_resolved_notification_resolves_the_incident_without_a_new_investigation(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    group = '{}:{alertname="KVCacheHigh"}'
    first = post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a")])).json()
    finish_investigations(db_url)

    resolved = post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a", status="resolved")]))

    assert resolved.status_code == 200, resolved.text
    assert resolved.json() == {
        "incident_id": first["incident_id"],
        "created": False,
        "investigation_id": None,
        "enqueued": False,
    }
    incident = incident_row(db_url, first["incident_id"])
    assert incident.status == "resolved"
    assert incident.resolved_at is not None and incident.resolved_at >= incident.created_at
    [alert] = rows(db_url, select(Alert.__table__))
    assert alert.status == "resolved" and alert.ends_at is not None
    assert recorder.enqueued == [first["investigation_id"]]
    assert count_rows(db_url)["investigations"] == 1


def test_firing_again_after_resolution_opens_a_new_incident(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    group = '{}:{alertname="KVCacheHigh"}'
    first = post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a")])).json()
    post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a", status="resolved")]))

    again = post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a")]))

    assert again.status_code == 200, again.text
    body = again.json()
    assert body["created"] is True and body["incident_id"] != first["incident_id"]
    assert body["investigation_id"] is not None
    assert recorder.enqueued == [first["investigation_id"], body["investigation_id"]]
    statuses = rows(db_url, select(Incident.id, Incident.status, Incident.group_key).order_by(Incident.id))
    assert [(r.id, r.status, r.group_key) for r in statuses] == [
        (first["incident_id"], "resolved", group),
        (body["incident_id"], "firing", group),
    ]


def test_late_resolve_notice_updates_the_closed_incident_instead_of_opening_one(
    intake_client: TestClient, db_url: str
) -> None:
    group = '{}:{alertname="KVCacheHigh"}'
    first = post_webhook(intake_client, make_payload(group, alerts=[make_alert("fp-a")])).json()
    resolve = make_payload(group, alerts=[make_alert("fp-a", status="resolved")])
    post_webhook(intake_client, resolve)

    repeat = post_webhook(intake_client, resolve)

    assert repeat.json()["incident_id"] == first["incident_id"] and repeat.json()["created"] is False
    assert count_rows(db_url)["incidents"] == 1


def test_concurrent_first_notifications_of_a_group_create_exactly_one_incident(db_url: str, tmp_path: Path) -> None:
    recorder = RecordingDispatcher()
    senders, rounds = 6, 3
    with LiveServer(create_app(make_settings(db_url, tmp_path), dispatcher=recorder)) as server:
        for round_no in range(rounds):
            group = f'{{}}:{{alertname="Race", round="{round_no}"}}'
            payload = make_payload(group, alerts=[make_alert(f"fp-{round_no}", alertname="Race")])
            barrier = threading.Barrier(senders)
            replies: list[httpx.Response | BaseException] = []

            def send(
                payload: dict[str, Any] = payload,
                barrier: threading.Barrier = barrier,
                replies: list[httpx.Response | BaseException] = replies,
            ) -> None:
                with httpx.Client(base_url=server.url, timeout=30) as client:
                    barrier.wait()
                    try:
                        replies.append(client.post("/api/v1/alertmanager", json=payload, headers=WEBHOOK_AUTH))
                    except BaseException as exc:  # reported by the assertion below
                        replies.append(exc)

            threads = [threading.Thread(target=send) for _ in range(senders)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)

            assert all(isinstance(r, httpx.Response) and r.status_code == 200 for r in replies), [
                r if isinstance(r, BaseException) else (r.status_code, r.text) for r in replies
            ]
            bodies = [r.json() for r in replies if isinstance(r, httpx.Response)]
            assert len(bodies) == senders
            assert len({b["incident_id"] for b in bodies}) == 1
            assert sum(b["created"] for b in bodies) == 1
            assert sum(b["investigation_id"] is not None for b in bodies) == 1
            assert count_for(db_url, Incident, group_key=group) == 1
            assert count_for(db_url, Notification, incident_id=bodies[0]["incident_id"]) == senders

    assert count_rows(db_url)["incidents"] == rounds
    assert count_rows(db_url)["investigations"] == rounds
    assert len(recorder.enqueued) == rounds


# --------------------------------------------------------------------------- refusals


def assert_refused(reply: httpx.Response, status: int, *fragments: str) -> str:
    """A refusal other than a 422 (those are field errors: tests/helpers/errors.py): one message."""
    assert reply.status_code == status, reply.text
    detail = reply.json()["detail"]
    assert isinstance(detail, str), detail
    for fragment in fragments:
        assert fragment in detail, detail
    return detail


def assert_nothing_stored(url: str, recorder: RecordingDispatcher) -> None:
    assert count_rows(url) == NOTHING
    assert recorder.enqueued == []


def test_malformed_json_is_refused_with_400(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    reply = intake_client.post(
        "/api/v1/alertmanager",
        content=b'{"version": "4", "alerts": [',
        headers=WEBHOOK_AUTH | {"Content-Type": "application/json"},
    )
    assert_refused(reply, 400, "not valid JSON")
    assert_nothing_stored(db_url, recorder)


def test_json_that_is_not_an_object_is_refused_with_422(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    reply = post_webhook(intake_client, [sample_payload()])
    only_error(intake_client, reply, ["body"], "dict_type", "expected a JSON object")
    assert_nothing_stored(db_url, recorder)


@pytest.mark.parametrize(
    ("mutate", "loc", "fragment"),
    [
        (lambda p: p["alerts"][0].update(startsAt="yesterday"), ["alerts", 0, "startsAt"], "datetime"),
        (lambda p: p["alerts"][0].pop("startsAt"), ["alerts", 0, "startsAt"], "required"),
        (lambda p: p["alerts"][0].update(startsAt="2026-12-03T08:40:00"), ["alerts", 0, "startsAt"], "timezone"),
        (lambda p: p["alerts"][0].update(startsAt="0001-01-01T00:00:00+02:00"), ["alerts", 0, "startsAt"], "range"),
        (lambda p: p["alerts"][0].update(endsAt="9999-12-31T23:00:00-05:00"), ["alerts", 0, "endsAt"], "range"),
        (lambda p: p["alerts"][0].update(status="pending"), ["alerts", 0, "status"], "firing"),
        (lambda p: p["alerts"][0].update(fingerprint=""), ["alerts", 0, "fingerprint"], "at least 1"),
        (lambda p: p.pop("groupKey"), ["groupKey"], "required"),
        (lambda p: p.update(version="3"), ["version"], "4"),
        (lambda p: p.update(alerts=[]), ["alerts"], "at least 1"),
    ],
    ids=[
        "unparseable-startsAt",
        "missing-startsAt",
        "naive-startsAt",
        "startsAt-before-year-1-in-UTC",
        "endsAt-after-9999-in-UTC",
        "bad-alert-status",
        "empty-fingerprint",
        "missing-groupKey",
        "version-3",
        "empty-alerts",
    ],
)
def test_payload_that_is_not_alertmanager_v4_is_refused_with_422_naming_the_field(
    intake_client: TestClient,
    db_url: str,
    recorder: RecordingDispatcher,
    mutate: Any,
    loc: list[str | int],
    fragment: str,
) -> None:
    payload = sample_payload()
    mutate(payload)
    reply = post_webhook(intake_client, payload)
    error = only_error(intake_client, reply, ["body", *loc], fragment=fragment)
    assert "\n" not in error["msg"] and "input" not in error  # the refused payload is not echoed back
    assert_nothing_stored(db_url, recorder)


def padded_payload(size: int) -> bytes:
    payload = sample_payload()
    payload["commonAnnotations"]["description"] = "x" * size
    return json.dumps(payload).encode()


def test_body_over_the_limit_is_refused_with_413_by_content_length(db_url: str, tmp_path: Path) -> None:
    recorder = RecordingDispatcher()
    settings = make_settings(db_url, tmp_path, webhook_max_body_bytes=2048)
    body = padded_payload(4096)
    with LiveServer(create_app(settings, dispatcher=recorder)) as server:
        reply = httpx.post(
            f"{server.url}/api/v1/alertmanager",
            content=body,
            timeout=10,
            headers=WEBHOOK_AUTH | {"Content-Type": "application/json"},
        )
        assert_refused(reply, 413, f"{len(body)} bytes", "limit of 2048 bytes")
        assert_nothing_stored(db_url, recorder)
        # The same document under the limit is accepted: the refusal was about size alone.
        small = httpx.post(
            f"{server.url}/api/v1/alertmanager",
            content=padded_payload(100),
            timeout=10,
            headers=WEBHOOK_AUTH | {"Content-Type": "application/json"},
        )
        assert small.status_code == 200, small.text
    counts = count_rows(db_url)
    assert (counts["incidents"], counts["notifications"]) == (1, 1)


def test_chunked_body_over_the_limit_is_refused_with_413(db_url: str, tmp_path: Path) -> None:
    recorder = RecordingDispatcher()
    settings = make_settings(db_url, tmp_path, webhook_max_body_bytes=2048)
    body = padded_payload(4096)

    def chunks() -> Any:
        for start in range(0, len(body), 512):
            yield body[start : start + 512]

    with LiveServer(create_app(settings, dispatcher=recorder)) as server, httpx.Client(timeout=10) as client:
        request = client.build_request(
            "POST",
            f"{server.url}/api/v1/alertmanager",
            content=chunks(),
            headers=WEBHOOK_AUTH | {"Content-Type": "application/json"},
        )
        assert "content-length" not in request.headers
        assert request.headers["transfer-encoding"] == "chunked"
        reply = client.send(request)
    assert_refused(reply, 413, "exceeds the limit of 2048 bytes")
    assert_nothing_stored(db_url, recorder)


@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        ({}, "missing credentials"),
        ({"Authorization": "Bearer not-the-token"}, "invalid webhook token"),
        (
            {"Authorization": "Basic " + base64.b64encode(b"alertmanager:not-the-token").decode()},
            "invalid webhook token",
        ),
        ({"Authorization": "Token " + WEBHOOK_TOKEN}, "missing credentials"),
    ],
    ids=["missing", "wrong-bearer", "wrong-basic-password", "unknown-scheme"],
)
def test_webhook_without_the_right_token_is_refused_with_401(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher, headers: dict[str, str], fragment: str
) -> None:
    reply = post_webhook(intake_client, sample_payload(), headers=headers)
    assert_refused(reply, 401, fragment)
    assert reply.headers["www-authenticate"] == "Bearer"
    assert_nothing_stored(db_url, recorder)


def test_basic_auth_with_the_token_as_password_is_accepted(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    credentials = base64.b64encode(f"alertmanager:{WEBHOOK_TOKEN}".encode()).decode()
    reply = post_webhook(intake_client, sample_payload(), headers={"Authorization": f"Basic {credentials}"})
    assert reply.status_code == 200, reply.text
    assert count_rows(db_url)["incidents"] == 1
    assert len(recorder.enqueued) == 1


def test_database_down_answers_503_with_retry_after_and_stores_nothing(tmp_path: Path) -> None:
    recorder = RecordingDispatcher()
    settings = make_settings(CLOSED_PORT_DATABASE_URL, tmp_path)
    with TestClient(create_app(settings, dispatcher=recorder)) as client:
        reply = post_webhook(client, sample_payload())
    assert_refused(reply, 503, "database unavailable", "not stored")
    assert int(reply.headers["retry-after"]) > 0
    assert recorder.enqueued == []
