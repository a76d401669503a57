"""`GET /api/v1/incidents/{id}/evidence`: the series kept with an investigation (what the incident
page draws), on both backends, written through the store's own write path."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient

from rca.domain.series import EvidenceSeries
from rca.store import evidence
from rca.store.db import session_scope
from tests.helpers.history import T0, finish_investigation
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import API_AUTH


def kept(key: str, offset: float) -> EvidenceSeries:
    return EvidenceSeries(
        key=key,
        labels={"instance": "gpu-node-1:8000", "model_name": "<b>qwen</b>"},
        start=T0 - timedelta(hours=3),
        step_seconds=60,
        values=[offset + n / 10 for n in range(200)] + [None, offset + 99.5],
        baseline_end=T0 - timedelta(minutes=30),
    )


def get_evidence(client: TestClient, incident_id: int, **params: int) -> tuple[int, dict]:
    reply = client.get(f"/api/v1/incidents/{incident_id}/evidence", params=params, headers=API_AUTH)
    return reply.status_code, reply.json()


def test_evidence_is_the_latest_finished_investigations_series_in_the_order_kept(intake_client: TestClient) -> None:
    url = intake_client.app.state.settings.effective_database_url
    reply = post_webhook(intake_client, make_payload("evidence", alerts=[make_alert("fp-1")]))
    incident_id = reply.json()["incident_id"]
    assert get_evidence(intake_client, incident_id) == (
        200,
        {"incident_id": incident_id, "investigation_id": None, "series": []},
    ), "nothing finished yet: no series, and no investigation named"

    first = finish_investigation(url, incident_id, ["kv_cache_usage", "queue_median"], ["kv_memory_pressure"])
    with session_scope(url) as session:
        evidence.save(session, first, [kept("queue_median", 1.0), kept("kv_cache_usage", 0.5)])
    # A newer alert queues a second investigation: the finished one's evidence is still the answer.
    post_webhook(intake_client, make_payload("evidence", alerts=[make_alert("fp-1"), make_alert("fp-2")]))
    status, body = get_evidence(intake_client, incident_id)
    assert status == 200 and body["investigation_id"] == first
    assert [s["finding"] for s in body["series"]] == ["queue_median", "kv_cache_usage"]
    queue = body["series"][0]
    assert queue["values"][:2] == [1.0, 1.1] and queue["values"][-2:] == [None, 100.5] and len(queue["values"]) == 202
    assert queue["step_seconds"] == 60 and queue["labels"]["model_name"] == "<b>qwen</b>"
    assert queue["start"].startswith("2026-12-01T09:00:00") and queue["baseline_end"].startswith("2026-12-01T11:30:00")

    second = finish_investigation(url, incident_id, ["queue_median"], ["arrival_surge"])
    assert get_evidence(intake_client, incident_id) == (
        200,
        {"incident_id": incident_id, "investigation_id": second, "series": []},
    ), "the newest finished investigation kept no series"
    status, body = get_evidence(intake_client, incident_id, investigation=first)
    assert status == 200 and body["investigation_id"] == first and len(body["series"]) == 2


def test_evidence_of_an_unknown_incident_or_a_foreign_investigation_is_a_404(intake_client: TestClient) -> None:
    url = intake_client.app.state.settings.effective_database_url
    ids = [post_webhook(intake_client, make_payload(g, alerts=[make_alert(g)])).json()["incident_id"] for g in "ab"]
    theirs = finish_investigation(url, ids[1], ["queue_median"], ["arrival_surge"])
    assert get_evidence(intake_client, ids[0], investigation=theirs) == (
        404,
        {"detail": f"investigation {theirs} is not one of incident {ids[0]}'s"},
    )
    assert get_evidence(intake_client, 999_999) == (404, {"detail": "incident 999999 not found"})
    status, body = get_evidence(intake_client, ids[0], investigation=0)
    assert status == 422 and body["detail"][0]["loc"] == ["query", "investigation"]
    assert intake_client.get(f"/api/v1/incidents/{ids[0]}/evidence").status_code == 401
