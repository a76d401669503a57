"""`POST /api/v1/incidents/{id}/investigations` (issue 32.2): a new investigation of an incident now,
firing or resolved, beside the earlier ones; one already queued or running answers instead of
another piling up; the write scope; and the issue's own case: Prometheus set only after the
incident resolved, the incident investigated again to a diagnosis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from rca.api.app import create_app
from rca.store import tokens
from rca.store.db import session_scope
from rca.store.models import InvestigationRow
from tests.fakes.prometheus import StubPrometheus
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import API_AUTH, RecordingDispatcher, make_settings, wait_for_investigation


def open_incident(client: TestClient, group: str, status: str = "firing") -> dict[str, Any]:
    reply = post_webhook(client, make_payload(group, alerts=[make_alert(f"fp-{group}", status=status)]))
    assert reply.status_code == 200, reply.text
    accepted: dict[str, Any] = reply.json()
    return accepted


def finish(url: str, investigation_id: int, status: str = "done") -> None:
    with session_scope(url) as session:
        session.get_one(InvestigationRow, investigation_id).status = status


def again(client: TestClient, incident_id: int, headers: dict[str, str] | None = None) -> Any:
    return client.post(
        f"/api/v1/incidents/{incident_id}/investigations", headers=API_AUTH if headers is None else headers
    )


def incident(client: TestClient, incident_id: int) -> dict[str, Any]:
    reply = client.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH)
    assert reply.status_code == 200, reply.text
    found: dict[str, Any] = reply.json()
    return found


def test_it_needs_a_token_with_the_write_scope(intake_client: TestClient, db_url: str) -> None:
    incident_id = open_incident(intake_client, "scopes")["incident_id"]
    with session_scope(db_url) as session:
        reader = tokens.create(session, "reader", "read")
    missing = again(intake_client, incident_id, headers={})
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    assert again(intake_client, incident_id, headers={"Authorization": "Bearer nope"}).status_code == 401
    refused = again(intake_client, incident_id, headers={"Authorization": f"Bearer {reader}"})
    assert refused.status_code == 403 and refused.json()["detail"] == "token 'reader' lacks the 'write' scope"
    assert len(incident(intake_client, incident_id)["investigations"]) == 1, "nothing queued by a refused request"


def test_an_unknown_incident_is_a_404(intake_client: TestClient, recorder: RecordingDispatcher) -> None:
    reply = again(intake_client, 123456)
    assert reply.status_code == 404 and reply.json()["detail"] == "incident 123456 not found"
    assert again(intake_client, 2**31).status_code == 422, "out of the id's range, as GET answers"
    assert recorder.enqueued == []


def test_a_new_investigation_is_queued_beside_the_earlier_and_repeats_get_the_active_one(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    accepted = open_incident(intake_client, "again")
    incident_id, first = accepted["incident_id"], accepted["investigation_id"]
    waiting = again(intake_client, incident_id)
    assert waiting.status_code == 200, "intake's investigation still waits: it answers"
    assert waiting.json() == {
        "incident_id": incident_id,
        "investigation_id": first,
        "status": "queued",
        "created": False,
        "requested_by": None,
        "enqueued": False,
    }
    assert recorder.enqueued == [first]

    finish(db_url, first)
    queued = again(intake_client, incident_id)
    assert queued.status_code == 202, queued.text
    body = queued.json()
    new = body["investigation_id"]
    assert new != first and body == {
        "incident_id": incident_id,
        "investigation_id": new,
        "status": "queued",
        "created": True,
        "requested_by": "env-token-1",
        "enqueued": True,
    }
    assert recorder.enqueued == [first, new]
    for _ in range(3):  # repeated requests do not pile up, nor enqueue it again
        repeated = again(intake_client, incident_id)
        assert repeated.status_code == 200 and repeated.json() == body | {"created": False, "enqueued": False}
    finish(db_url, new, "running")
    running = again(intake_client, incident_id)
    assert running.status_code == 200 and running.json()["status"] == "running"
    assert recorder.enqueued == [first, new]

    shown = incident(intake_client, incident_id)
    assert [(i["id"], i["reason"], i["requested_by"]) for i in shown["investigations"]] == [
        (first, "new_incident", None),
        (new, "requested", "env-token-1"),
    ]
    assert shown["investigation"]["id"] == new, "the newest is the incident's investigation"


def test_investigating_a_fleet_incident_again_queues_and_enqueues_its_whole_round(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    hosts = ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    alerts = [make_alert(f"fp-{host}", instance=f"{host}:8000") for host in hosts]
    incident_id = post_webhook(intake_client, make_payload("fleet", alerts=alerts)).json()["incident_id"]
    first_round = list(recorder.enqueued)
    for investigation_id in first_round:
        finish(db_url, investigation_id)

    queued = again(intake_client, incident_id)

    assert queued.status_code == 202 and queued.json()["enqueued"] is True, queued.text
    second_round = recorder.enqueued[len(first_round) :]
    shown = incident(intake_client, incident_id)
    rerun = [inv for inv in shown["investigations"] if inv["id"] in second_round]
    assert [(inv["host"], inv["round_id"], inv["reason"]) for inv in rerun] == [
        (host, queued.json()["investigation_id"], "requested") for host in hosts
    ]
    assert shown["fleet"]["round_id"] == queued.json()["investigation_id"]
    assert shown["fleet"]["unfinished"] == hosts and len(first_round) == 3


def test_a_named_token_is_recorded_as_who_asked(intake_client: TestClient, db_url: str) -> None:
    accepted = open_incident(intake_client, "named")
    finish(db_url, accepted["investigation_id"])
    with session_scope(db_url) as session:
        writer = tokens.create(session, "oncall-alice", "write")
    reply = again(intake_client, accepted["incident_id"], headers={"Authorization": f"Bearer {writer}"})
    assert reply.status_code == 202 and reply.json()["requested_by"] == "oncall-alice"
    assert incident(intake_client, accepted["incident_id"])["investigation"]["requested_by"] == "oncall-alice"


def test_a_resolved_incident_is_investigated_again_and_stays_resolved(
    intake_client: TestClient, db_url: str, recorder: RecordingDispatcher
) -> None:
    accepted = open_incident(intake_client, "resolved")
    open_incident(intake_client, "resolved", status="resolved")
    finish(db_url, accepted["investigation_id"])
    reply = again(intake_client, accepted["incident_id"])
    assert reply.status_code == 202 and reply.json()["created"]
    assert recorder.enqueued[-1] == reply.json()["investigation_id"]
    shown = incident(intake_client, accepted["incident_id"])
    assert shown["status"] == "resolved" and shown["investigation"]["status"] == "queued"


def test_prometheus_set_after_the_incident_resolved_then_investigated_again_to_a_diagnosis(
    db_url: str, tmp_path: Path, prometheus: StubPrometheus
) -> None:
    """The issue's case: the service ran without RCA_PROMETHEUS_URL, the incident resolved with an
    inconclusive investigation; once Prometheus is set, investigating again ranks the causes."""
    with TestClient(create_app(make_settings(db_url, tmp_path))) as client:  # the embedded runner, no Prometheus
        incident_id = open_incident(client, "blind")["incident_id"]
        blind = wait_for_investigation(client, incident_id)["investigation"]
        open_incident(client, "blind", status="resolved")
    assert (blind["status"], blind["inconclusive_reason"]) == ("inconclusive", "no_prometheus")

    with TestClient(create_app(make_settings(db_url, tmp_path, prometheus_url=prometheus.url))) as client:
        reply = again(client, incident_id)
        assert reply.status_code == 202, reply.text
        shown = wait_for_investigation(client, incident_id)
    inv = shown["investigation"]
    assert inv["id"] == reply.json()["investigation_id"] and inv["reason"] == "requested"
    assert inv["status"] == "done" and inv["hypotheses"], inv["error"]
    assert shown["status"] == "resolved"
    assert [i["id"] for i in shown["investigations"]] == [blind["id"], inv["id"]], "the blind one stays"
    assert shown["investigations"][0]["status"] == "inconclusive"


def test_the_openapi_document_states_the_answers(intake_client: TestClient) -> None:
    operation = intake_client.get("/openapi.json").json()["paths"]["/api/v1/incidents/{incident_id}/investigations"]
    post = operation["post"]
    assert {"200", "202", "401", "403", "404", "422", "503"} <= set(post["responses"])
    for code in ("200", "202"):
        schema = post["responses"][code]["content"]["application/json"]["schema"]
        assert schema["$ref"].endswith("/InvestigationRequestedOut"), code
