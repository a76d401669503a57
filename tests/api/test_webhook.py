"""`POST /api/v1/alertmanager`: what gets stored, how notifications of one alert group fold into
one incident, and what is refused (with nothing stored). Intake runs on PostgreSQL and on the
embedded SQLite store; the dispatcher only records, so investigations stay `queued` unless a
test changes them."""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from rca.api.app import create_app
from rca.store.models import AlertRow, IncidentRow, InvestigationRow, NotificationRow
from tests.helpers.databases import CLOSED_PORT_DATABASE_URL, count_for, count_rows, investigation_rows, rows
from tests.helpers.errors import field_errors, only_error
from tests.helpers.payloads import make_alert, make_payload, post_webhook, sample_payload
from tests.helpers.service import (
    API_AUTH,
    WEBHOOK_AUTH,
    WEBHOOK_TOKEN,
    LiveServer,
    RecordingDispatcher,
    make_settings,
)

NOTHING = {
    "evidence_series": 0,
    "hypotheses": 0,
    "findings": 0,
    "notifications": 0,
    "alerts": 0,
    "investigations": 0,
    "incidents": 0,
}


def incident_row(url: str, incident_id: int) -> Any:
    [row] = rows(url, select(IncidentRow.__table__).where(IncidentRow.id == incident_id))
    return row


def finish_investigations(url: str) -> None:
    """Pretend the worker finished whatever is queued, so a new alert may ask for another run."""
    from rca.store.db import get_engine

    with get_engine(url).begin() as conn:
        conn.execute(update(InvestigationRow).values(status="done", finished_at=datetime.now(UTC)))


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

    [alert] = rows(db_url, select(AlertRow.__table__))
    assert alert.fingerprint == payload["alerts"][0]["fingerprint"]
    assert alert.raw == payload["alerts"][0]  # verbatim, including Go's zero endsAt
    assert alert.ends_at is None
    assert alert.labels["model_name"] == "meta-llama/Llama-3.1-8B-Instruct"

    [notification] = rows(db_url, select(NotificationRow.__table__))
    assert notification.payload == payload and notification.incident_id == body["incident_id"]

    [inv] = investigation_rows(db_url)
    assert (inv.id, inv.status, inv.reason, inv.incident_id) == (
        body["investigation_id"],
        "queued",
        "new_incident",
        body["incident_id"],
    )


def test_a_group_of_six_hosts_queues_and_enqueues_one_investigation_per_host(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    hosts = [f"gpu-node-{n}" for n in range(1, 7)]
    alerts = [make_alert(f"fp-{host}", instance=f"{host}:8000") for host in hosts]

    reply = post_webhook(intake_client, make_payload(alerts=alerts))

    assert reply.status_code == 200, reply.text
    body = reply.json()
    found = investigation_rows(db_url)
    assert sorted(inv.host for inv in found) == hosts
    assert {inv.round_id for inv in found} == {body["investigation_id"]}
    assert sorted(recorder.enqueued) == sorted(inv.id for inv in found) and body["enqueued"] is True
    # a host whose alert arrives while the round waits joins it; the others are not queued again
    post_webhook(intake_client, make_payload(alerts=[*alerts, make_alert("fp-7", instance="gpu-node-7:8000")]))
    joined = investigation_rows(db_url)[6:]
    assert [(inv.host, inv.round_id) for inv in joined] == [("gpu-node-7", body["investigation_id"])]
    assert recorder.enqueued[6:] == [joined[0].id]


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
    assert count_for(db_url, AlertRow, incident_id=first["incident_id"]) == 2
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
    [alert] = rows(db_url, select(AlertRow.__table__))
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
    statuses = rows(db_url, select(IncidentRow.id, IncidentRow.status, IncidentRow.group_key).order_by(IncidentRow.id))
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
            assert count_for(db_url, IncidentRow, group_key=group) == 1
            assert count_for(db_url, NotificationRow, incident_id=bodies[0]["incident_id"]) == senders

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
        (lambda p: p["alerts"][0].update(startsAt="yesterday"), ["alerts", 0, "startsAt"], "ISO 8601"),
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


# --------------------------------------------------------------------------- what can never be stored or investigated


def with_extra(payload: dict[str, Any], fragment: str) -> bytes:
    """The payload with a top-level field `extra` whose JSON text is `fragment` (which json.dumps
    cannot write: NaN, 4,400-digit integers, nesting deeper than Python's stack)."""
    text = json.dumps(payload)
    return (text[:-1] + ', "extra": ' + fragment + "}").encode()


def post_raw(client: TestClient, body: bytes) -> httpx.Response:
    return client.post(
        "/api/v1/alertmanager", content=body, headers=WEBHOOK_AUTH | {"Content-Type": "application/json"}
    )


def distinct_words(chars: int, seed: int = 0) -> str:
    """Text of distinct random words: the worst case for a tsvector's size, and incompressible."""
    import random
    import string

    rnd = random.Random(seed)
    words = (" " + "".join(rnd.choices(string.ascii_lowercase, k=7)) for _ in range(chars // 8 + 1))
    return "".join(words)[:chars]


def alert_with(**changes: Any) -> dict[str, Any]:
    alert = make_alert("fp-limits")
    for key, value in changes.items():
        if key in ("labels", "annotations"):
            alert[key] = {**alert[key], **value}
        else:
            alert[key] = value
    return alert


@pytest.mark.parametrize(
    ("body", "loc", "type_", "fragment"),
    [
        (  # JSON that Python decodes but no backend stores: each was a 500
            with_extra(sample_payload(), "[" * 1000 + "]" * 1000),
            ["body"],
            "json_too_deep",
            "deeper than 32 levels",
        ),
        (
            with_extra(sample_payload(), "1" * 4400),
            ["body", "extra"],
            "number_out_of_range",
            "4400 digits",
        ),
        (with_extra(sample_payload(), "NaN"), ["body", "extra"], "not_a_json_number", "NaN is not a JSON number"),
        (
            with_extra(sample_payload(), "-Infinity"),
            ["body", "extra"],
            "not_a_json_number",
            "-Infinity is not a JSON number",
        ),
        (with_extra(sample_payload(), "[1e999]"), ["body", "extra", 0], "number_out_of_range", "1e999 is out of range"),
        (  # stored, then unreadable: the row's JSON nested deeper than the decoder's stack
            with_extra(make_payload(alerts=[make_alert("fp")]), "[" * 950 + "]" * 950),
            ["body", "extra", *[0] * 31],
            "json_too_deep",
            "deeper than 32 levels",
        ),
        (  # longer than the columns: a 500 from the database
            json.dumps(make_payload(alerts=[alert_with(labels={"alertname": "A" * 256})])).encode(),
            ["body", "groupLabels"],
            "string_too_long",
            "the alertname label has 256 characters; at most 255",
        ),
        (
            json.dumps(make_payload() | {"receiver": "r" * 256}).encode(),
            ["body", "receiver"],
            "string_too_long",
            "at most 255 characters",
        ),
        (  # accepted, then the investigation's window overflowed
            json.dumps(make_payload(alerts=[alert_with(startsAt="0001-01-01T00:00:00Z")])).encode(),
            ["body", "alerts", 0, "startsAt"],
            "datetime_out_of_range",
            "from 2000-01-01 up to 2200-01-01",
        ),
        (  # over the database's own limits: a 503 "retry later", forever
            json.dumps(make_payload(distinct_words(2700))).encode(),
            ["body", "groupKey"],
            "limit_exceeded",
            "groupKey has 2700 bytes, over RCA_WEBHOOK_MAX_GROUP_KEY_BYTES=2048",
        ),
        (
            json.dumps(
                make_payload(alerts=[alert_with(annotations={"description": distinct_words(900_000)})])
            ).encode(),
            ["body", "alerts", 0, "annotations"],
            "limit_exceeded",
            "annotation 'description' has 900000 characters, over RCA_WEBHOOK_MAX_ANNOTATION_VALUE_CHARS=65536",
        ),
        (  # the other limits, each named in the answer
            json.dumps(make_payload(alerts=[make_alert(f"fp-{n}") for n in range(1001)])).encode(),
            ["body", "alerts"],
            "limit_exceeded",
            "1001 alerts, over RCA_WEBHOOK_MAX_ALERTS=1000; set max_alerts: 1000",
        ),
        (
            json.dumps(make_payload(alerts=[alert_with(labels={f"l{n}": "v" for n in range(100)})])).encode(),
            ["body", "alerts", 0, "labels"],
            "limit_exceeded",
            "103 labels, over RCA_WEBHOOK_MAX_LABELS=100",
        ),
        (
            json.dumps(make_payload(alerts=[alert_with(labels={"n" * 257: "v"})])).encode(),
            ["body", "alerts", 0, "labels"],
            "limit_exceeded",
            "has 257 characters, over RCA_WEBHOOK_MAX_NAME_CHARS=256",
        ),
        (
            json.dumps(make_payload(alerts=[alert_with(labels={"pod": "p" * 2049})])).encode(),
            ["body", "alerts", 0, "labels"],
            "limit_exceeded",
            "label 'pod' has 2049 characters, over RCA_WEBHOOK_MAX_LABEL_VALUE_CHARS=2048",
        ),
    ],
    ids=[
        "nested-1000-deep",
        "integer-of-4400-digits",
        "NaN",
        "-Infinity",
        "1e999",
        "extra-field-nested-950-deep",
        "alertname-over-255",
        "receiver-over-255",
        "startsAt-year-1-UTC",
        "groupKey-of-2700-incompressible-bytes",
        "annotation-of-900KB-distinct-words",
        "too-many-alerts",
        "too-many-labels",
        "label-name-too-long",
        "label-value-too-long",
    ],
)
def test_payload_that_could_never_be_stored_or_investigated_is_refused_with_422_naming_the_problem(
    intake_client: TestClient,
    db_url: str,
    recorder: RecordingDispatcher,
    body: bytes,
    loc: list[str | int],
    type_: str,
    fragment: str,
) -> None:
    reply = post_raw(intake_client, body)
    errors = field_errors(intake_client, reply)
    [error] = [e for e in errors if e["loc"] == loc] or [errors]  # e.g. labels also at fault in commonLabels
    assert error["type"] == type_, errors
    assert fragment in error["msg"], errors
    assert all(len(e["msg"]) < 300 and "input" not in e for e in errors)  # nothing refused is echoed back
    assert_nothing_stored(db_url, recorder)


@pytest.mark.parametrize(
    ("limits", "payload", "fragment"),
    [
        (
            {"max_group_key_bytes": 200_000},
            make_payload(distinct_words(100_000)),
            "index row",
        ),
        (
            {"max_annotation_value_chars": 1_000_000},
            make_payload(alerts=[alert_with(annotations={"description": distinct_words(900_000)})]),
            "too long for tsvector",
        ),
    ],
    ids=["groupKey-over-the-index-row-limit", "search-document-over-the-tsvector-limit"],
)
def test_a_notification_over_a_database_limit_is_413_not_503_and_its_key_is_not_logged_whole(
    pg_db: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    limits: dict[str, int],
    payload: dict[str, Any],
    fragment: str,
) -> None:
    """The database's own refusal (SQLSTATE class 54), should the webhook limits let it through (here
    they are raised past it): a 503 would have Alertmanager retry a notification that can never be
    stored."""
    from rca.api import webhook
    from rca.intake.limits import IntakeLimits
    from rca.store import digests

    given = IntakeLimits.from_settings(make_settings(pg_db, tmp_path))
    monkeypatch.setattr(webhook.IntakeLimits, "from_settings", lambda _settings: replace(given, **limits))
    monkeypatch.setattr(digests, "DOCUMENT_CHARS", 10_000_000)
    recorder = RecordingDispatcher()
    with TestClient(create_app(make_settings(pg_db, tmp_path), dispatcher=recorder)) as client:
        reply = post_webhook(client, payload)
    detail = assert_refused(reply, 413, "exceeds a database limit", fragment, "nothing was stored")
    assert "retry-after" not in reply.headers and len(detail) < 500
    assert_nothing_stored(pg_db, recorder)
    logged = [r.getMessage() for r in caplog.records]
    assert any(fragment in line for line in logged), logged
    assert all(len(line) < 1000 for line in logged), [line[:200] for line in logged]


def test_an_alert_storm_of_long_annotations_is_stored_and_stays_searchable(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    """Each annotation is within its limit, but together they are 1.9 MB of distinct words over two
    notifications: the incident's search document keeps its first 100,000 characters, so its
    tsvector stays under Postgres' 1 MB (it was a 503 for ever after)."""
    group = '{}:{alertname="Storm"}'
    for part in range(2):
        alerts = [
            alert_with(annotations={"description": distinct_words(60_000, seed=16 * part + n)})
            | {"fingerprint": f"fp-{part}-{n}"}
            for n in range(16)
        ]
        reply = post_webhook(intake_client, make_payload(group, alerts=alerts))
        assert reply.status_code == 200, reply.text
    assert count_for(db_url, AlertRow, incident_id=reply.json()["incident_id"]) == 32
    found = intake_client.get("/api/v1/incidents", params={"q": "LLMRequestQueueMedianHigh"}, headers=API_AUTH)
    assert [item["id"] for item in found.json()["items"]] == [reply.json()["incident_id"]]


def test_many_alerts_of_one_notification_are_read_in_one_query_not_one_each(pg_db: str, tmp_path: Path) -> None:
    """A storm's notification re-sends every alert of its group: one SELECT finds the stored ones."""
    from sqlalchemy import event

    from rca.store.db import get_engine

    group = '{}:{alertname="Storm"}'
    alerts = [make_alert(f"fp-{n}") for n in range(300)]
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    with TestClient(create_app(make_settings(pg_db, tmp_path), dispatcher=RecordingDispatcher())) as client:
        assert post_webhook(client, make_payload(group, alerts=alerts[:200])).status_code == 200
        engine = get_engine(pg_db)
        event.listen(engine, "before_cursor_execute", record)
        try:
            reply = post_webhook(client, make_payload(group, alerts=alerts))
        finally:
            event.remove(engine, "before_cursor_execute", record)
    assert reply.status_code == 200, reply.text
    alert_selects = [s for s in statements if s.lstrip().startswith("SELECT") and "FROM alerts" in s]
    # the notification's alerts; the incident's hosts, for the investigation its new alerts queue
    # (rca.incidents.queue); the digest's
    assert len(alert_selects) <= 3, len(alert_selects)
    assert count_for(pg_db, AlertRow, incident_id=reply.json()["incident_id"]) == 300


# --------------------------------------------------------------------------- the cost of one notification


def statements_of(url: str, post: Any) -> list[str]:
    """The SQL statements `post()` sends to the database, each on one line."""
    from sqlalchemy import event

    from rca.store.db import get_engine

    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(" ".join(statement.split()))

    engine = get_engine(url)
    event.listen(engine, "before_cursor_execute", record)
    try:
        reply = post()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert reply.status_code == 200, reply.text
    return statements


def searched(client: TestClient, **params: str) -> list[int]:
    found = client.get("/api/v1/incidents", params=params, headers=API_AUTH)
    assert found.status_code == 200, found.text
    return [item["id"] for item in found.json()["items"]]


def test_a_new_group_is_stored_in_eight_statements_and_a_plain_resend_in_five_without_the_digest(
    pg_db: str, tmp_path: Path
) -> None:
    """Intake's hot path (bench/intake_throughput.py): a new group writes its incident, notification,
    alerts, investigations (one per host) and search digest from what it has in hand; a re-send that changes nothing
    the digest is built from reads and rewrites no digest. Both stay searchable."""
    group = '{}:{alertname="QueueHigh",node="n1"}'
    payload = make_payload(group, alerts=[make_alert("fp-1"), make_alert("fp-2", instance="gpu-node-2:8000")])
    with TestClient(create_app(make_settings(pg_db, tmp_path), dispatcher=RecordingDispatcher())) as client:
        first = statements_of(pg_db, lambda: post_webhook(client, payload))
        resent = statements_of(pg_db, lambda: post_webhook(client, payload))
        [incident_id] = searched(client, q="gpu-node-2")

    # SELECT the open incident, then, in one statement, the early warning it might join (by
    # fingerprint or by the scan's warned targets); INSERT the incident, notification, alerts,
    # investigations and digest; the group names two hosts: UPDATE their round's shared id
    assert len(first) == 8, first
    assert [s.split()[1] for s in first if s.startswith("UPDATE")] == ["investigations"], first
    selects = [s for s in first if s.startswith("SELECT")]
    assert len(selects) == 2, first
    assert selects[0].split(" FROM ")[1].split()[0] == "incidents" and "FOR UPDATE" in selects[0]
    assert "JOIN alerts" in selects[1] and "UNION ALL" in selects[1] and "FROM scan_targets" in selects[1]
    # SELECT the incident and its alerts; INSERT the notification; UPDATE the incident and the alert
    assert len(resent) == 5, resent
    assert not [s for s in resent if "incident_digests" in s or "investigations" in s], resent
    assert incident_row(pg_db, incident_id).notification_count == 2


def test_a_resend_that_changes_the_searchable_text_or_the_status_rewrites_the_digest(
    intake_client: TestClient, db_url: str
) -> None:
    group = '{}:{alertname="QueueHigh"}'
    incident_id = post_webhook(intake_client, make_payload(group)).json()["incident_id"]
    assert searched(intake_client, q="memorysaturation") == []

    changed = make_alert("fp-0001") | {"annotations": {"summary": "memorysaturation on the node"}}
    assert post_webhook(intake_client, make_payload(group, alerts=[changed])).status_code == 200
    assert searched(intake_client, q="memorysaturation") == [incident_id]

    common = make_payload(group, alerts=[changed]) | {"commonAnnotations": {"runbook": "restartthepod"}}
    assert post_webhook(intake_client, common).status_code == 200
    assert searched(intake_client, q="restartthepod") == [incident_id]

    joined = make_payload(group, alerts=[changed, make_alert("fp-0002", instance="gpu-node-7:8000")])
    assert post_webhook(intake_client, joined).status_code == 200
    assert searched(intake_client, q="gpu-node-7") == [incident_id]

    assert searched(intake_client, status="resolved") == []
    resolved = make_payload(group, alerts=[make_alert("fp-0001", status="resolved")])
    assert post_webhook(intake_client, resolved).status_code == 200
    assert searched(intake_client, status="resolved") == [incident_id]


# --------------------------------------------------------------------------- batches (rca/api/batch.py)


def test_concurrent_webhooks_are_stored_in_batches_each_answered_with_its_own_incident(
    pg_db: str, tmp_path: Path
) -> None:
    """Webhooks that arrive while the process's transactions are busy are stored together: fewer
    INSERTs into incidents than new groups, and each request still gets its own incident."""
    from sqlalchemy import event

    from rca.store.db import get_engine

    senders = 40
    inserts: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.startswith("INSERT INTO incidents"):
            inserts.append(statement)

    recorder = RecordingDispatcher()
    engine = get_engine(pg_db)
    event.listen(engine, "before_cursor_execute", record)
    try:
        with LiveServer(create_app(make_settings(pg_db, tmp_path), dispatcher=recorder)) as server:
            barrier = threading.Barrier(senders)
            replies: dict[int, httpx.Response] = {}

            def send(n: int) -> None:
                payload = make_payload(f'{{}}:{{alertname="Burst",n="{n}"}}', alerts=[make_alert(f"fp-burst-{n}")])
                with httpx.Client(base_url=server.url, timeout=30) as client:
                    barrier.wait()
                    replies[n] = client.post("/api/v1/alertmanager", json=payload, headers=WEBHOOK_AUTH)

            threads = [threading.Thread(target=send, args=(n,)) for n in range(senders)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
    finally:
        event.remove(engine, "before_cursor_execute", record)

    assert sorted(replies) == list(range(senders))
    assert all(r.status_code == 200 for r in replies.values()), [
        r.text for r in replies.values() if r.status_code != 200
    ]
    bodies = {n: r.json() for n, r in replies.items()}
    assert len({b["incident_id"] for b in bodies.values()}) == senders
    assert all(b["created"] and b["enqueued"] for b in bodies.values())
    for n, body in bodies.items():  # each answer names the incident of its own group
        assert incident_row(pg_db, body["incident_id"]).group_key == f'{{}}:{{alertname="Burst",n="{n}"}}'
    assert sorted(recorder.enqueued) == sorted(b["investigation_id"] for b in bodies.values())
    assert count_rows(pg_db)["incidents"] == senders
    assert len(inserts) < senders, len(inserts)


def test_a_batch_that_one_notification_fails_is_stored_again_one_by_one(
    pg_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notification the database refuses (here a groupKey over the index row limit, past raised
    webhook limits) fails its batch's transaction; the others are then stored one by one and only
    it is refused, as it would have been alone."""
    from rca.api import webhook
    from rca.api.database import refusal
    from rca.intake.limits import IntakeLimits
    from rca.intake.schema import WebhookPayload
    from rca.intake.service import Notice, fleet_of

    settings = make_settings(pg_db, tmp_path)
    limits = replace(IntakeLimits.from_settings(settings), max_group_key_bytes=200_000).context()
    payloads = [
        make_payload('{}:{alertname="Fine",n="1"}', alerts=[make_alert("fp-fine-1")]),
        make_payload(distinct_words(100_000), alerts=[make_alert("fp-poison")]),
        make_payload('{}:{alertname="Fine",n="2"}', alerts=[make_alert("fp-fine-2")]),
    ]
    batch = [Notice(WebhookPayload.model_validate(p, context=limits), p) for p in payloads]
    recorder = RecordingDispatcher()

    first, poison, second = webhook._store_batch(pg_db, False, fleet_of(settings), recorder, batch)

    assert isinstance(first, webhook.Stored) and isinstance(second, webhook.Stored)
    answer = refusal(poison, "the notification", "unavailable")  # type: ignore[arg-type]
    assert answer is not None and answer.status_code == 413  # type: ignore[union-attr]
    assert count_rows(pg_db)["incidents"] == 2
    assert recorder.enqueued == [first.result.investigation_id, second.result.investigation_id]


def test_a_batch_with_the_database_down_is_refused_whole_without_trying_each(tmp_path: Path) -> None:
    from sqlalchemy import event

    from rca.api import webhook
    from rca.intake.schema import WebhookPayload
    from rca.intake.service import Notice, fleet_of
    from rca.store.db import get_engine
    from rca.store.errors import unreachable

    payloads = [make_payload(f'{{}}:{{n="{n}"}}', alerts=[make_alert(f"fp-{n}")]) for n in range(3)]
    batch = [Notice(WebhookPayload.model_validate(p), p) for p in payloads]
    settings = make_settings(CLOSED_PORT_DATABASE_URL, tmp_path)
    connects: list[int] = []

    def connecting(*_args: Any) -> None:
        connects.append(1)

    engine = get_engine(CLOSED_PORT_DATABASE_URL)
    event.listen(engine, "do_connect", connecting)
    try:
        outcomes = webhook._store_batch(
            CLOSED_PORT_DATABASE_URL, False, fleet_of(settings), RecordingDispatcher(), batch
        )
    finally:
        event.remove(engine, "do_connect", connecting)
    assert all(unreachable(outcome) for outcome in outcomes), outcomes  # type: ignore[arg-type]
    assert len(connects) == 1
