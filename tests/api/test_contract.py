"""What the OpenAPI document states is what the code accepts and refuses (issue 35): times are
ISO 8601 date-times, never a number of seconds; a count is a count, never `false`; a 405 names every
method the path serves; the feedback's limits the checks enforce are in the schema."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from rca.diagnosis.ranking import taxonomy
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import API_AUTH


@pytest.mark.parametrize("query", ["until=0.5", "until=-5", "since=1700000000", "since=1e9", "since=yesterday"])
def test_a_time_that_is_not_an_iso_date_time_is_refused(intake_client: TestClient, query: str) -> None:
    reply = intake_client.get(f"/api/v1/incidents?{query}", headers=API_AUTH)
    assert reply.status_code == 422, reply.text
    [error] = reply.json()["detail"]
    assert error["loc"] == ["query", query.split("=")[0]] and "ISO 8601" in error["msg"]


def test_an_iso_date_time_with_its_zone_is_taken(intake_client: TestClient) -> None:
    reply = intake_client.get(
        "/api/v1/incidents?since=2026-01-01T00:00:00Z&until=2026-12-31T23:59:59%2B01:00", headers=API_AUTH
    )
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize(("field", "value"), [("truncatedAlerts", False), ("truncatedAlerts", "3")])
def test_a_webhook_count_is_a_count(intake_client: TestClient, field: str, value: object) -> None:
    payload = make_payload("g1", alerts=[make_alert("fp-1")]) | {field: value}
    reply = post_webhook(intake_client, payload)
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"][0]["loc"] == ["body", field]


def test_an_alert_time_given_in_seconds_is_refused(intake_client: TestClient) -> None:
    alert = make_alert("fp-1") | {"startsAt": 1700000000}
    reply = post_webhook(intake_client, make_payload("g1", alerts=[alert]))
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"][0]["loc"] == ["body", "alerts", 0, "startsAt"]


@pytest.mark.parametrize("method", ["OPTIONS", "DELETE", "PUT", "PATCH"])
def test_a_405_names_every_method_of_the_path(intake_client: TestClient, method: str) -> None:
    reply = intake_client.request(method, "/api/v1/incidents/1/feedback", headers=API_AUTH)
    assert reply.status_code == 405
    assert reply.headers["allow"] == "GET, HEAD, POST"


def test_the_feedback_schema_states_the_taxonomy_and_the_nul_the_checks_refuse(intake_client: TestClient) -> None:
    schema = intake_client.get("/openapi.json").json()["components"]["schemas"]["FeedbackIn"]["properties"]
    assert schema["category"]["enum"] == list(taxonomy())
    assert schema["note"]["pattern"] == "^[^\\u0000]*$"
