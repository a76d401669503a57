"""Every source of a 422 answers with the one documented shape (FastAPI's field errors), and the
body matches the schema that operation declares for its 422 in /openapi.json."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.helpers.errors import assert_documented, field_errors
from tests.helpers.paths import REPO
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import API_AUTH, WEBHOOK_AUTH

WEBHOOK = ("POST", "/api/v1/alertmanager")
SEARCH = ("GET", "/api/v1/incidents")
FEEDBACK = ("POST", "/api/v1/incidents/{incident_id}/feedback")
NO_GROUP_KEY = {k: v for k, v in make_payload("g", alerts=[make_alert("fp")]).items() if k != "groupKey"}
YEAR_ONE = make_alert("fp") | {"startsAt": "0001-01-01T00:00:00Z"}
FORGED_CURSOR = base64.urlsafe_b64encode(json.dumps({"o": "time"}).encode()).decode()

# (operation, request, expected loc, expected type): one per place a 422 comes from.
SOURCES: list[tuple[tuple[str, str], dict[str, Any], list[str | int], str]] = [
    # the webhook's own checks, in the order it makes them
    (WEBHOOK, {"content": b"[1]"}, ["body"], "dict_type"),
    (WEBHOOK, {"content": b'{"receiver": "a\\u0000"}'}, ["body", "receiver"], "unstorable_text"),
    (WEBHOOK, {"content": b'{"receiver": NaN}'}, ["body", "receiver"], "not_a_json_number"),
    (WEBHOOK, {"content": b'{"receiver": [1e999]}'}, ["body", "receiver", 0], "number_out_of_range"),
    (WEBHOOK, {"content": b'{"a": ' + b"[" * 40 + b"]" * 40 + b"}"}, ["body", "a", *[0] * 31], "json_too_deep"),
    (WEBHOOK, {"json": NO_GROUP_KEY}, ["body", "groupKey"], "missing"),
    (WEBHOOK, {"json": make_payload("g" * 2049, alerts=[make_alert("fp")])}, ["body", "groupKey"], "limit_exceeded"),
    (
        WEBHOOK,
        {"json": make_payload("g", alerts=[YEAR_ONE])},
        ["body", "alerts", 0, "startsAt"],
        "datetime_out_of_range",
    ),
    # search: FastAPI's parameter checks, then the service's
    (SEARCH, {"params": {"limit": "0"}}, ["query", "limit"], "greater_than_equal"),
    (SEARCH, {"params": {"since": "2026-12-03T10:00:00"}}, ["query", "since"], "timezone_aware"),
    (SEARCH, {"params": {"q": "a\x00"}}, ["query", "q"], "unstorable_text"),
    (SEARCH, {"params": {"label": "nolabel"}}, ["query", "label"], "invalid_label_filter"),
    (SEARCH, {"params": {"q": "!!!"}}, ["query", "q"], "no_searchable_words"),
    (SEARCH, {"params": {"sort": "relevance"}}, ["query", "sort"], "relevance_without_q"),
    (
        SEARCH,
        {"params": {"since": "2026-12-03T11:00:00Z", "until": "2026-12-03T10:00:00Z"}},
        ["query", "until"],
        "invalid_time_range",
    ),
    (SEARCH, {"params": {"since": "0001-01-01T00:00:00+02:00"}}, ["query", "since"], "datetime_out_of_range"),
    (SEARCH, {"params": {"cursor": FORGED_CURSOR}}, ["query", "cursor"], "invalid_cursor"),
    # one incident, its similar incidents and feedback: path, query and body
    (
        ("GET", "/api/v1/incidents/{incident_id}"),
        {"path": {"incident_id": "0"}},
        ["path", "incident_id"],
        "greater_than_equal",
    ),
    (
        ("GET", "/api/v1/incidents/{incident_id}/similar"),
        {"params": {"limit": "51"}},
        ["query", "limit"],
        "less_than_equal",
    ),
    (
        ("GET", "/api/v1/incidents/{incident_id}/feedback"),
        {"path": {"incident_id": "x"}},
        ["path", "incident_id"],
        "int_parsing",
    ),
    (FEEDBACK, {"content": b"{"}, ["body", 1], "json_invalid"),
    (FEEDBACK, {"content": b'{"note": "\xff"}'}, ["body", 10], "json_invalid"),
    (
        FEEDBACK,
        {"content": b'{"note": ' + b"[" * 3000 + b"]" * 3000 + b"}"},
        ["body"],  # Python's decoder gave up before the depth could be walked
        "json_too_deep",
    ),
    (
        FEEDBACK,
        {"content": b'{"hypotheses": [{"rank": ' + b"9" * 5000 + b"}]}"},
        ["body", "hypotheses", 0, "rank"],
        "number_out_of_range",
    ),  # fmt: skip
    (FEEDBACK, {"json": {"category": "kv_memory_pressure", "note": "\x00"}}, ["body", "note"], "unstorable_text"),
    (
        FEEDBACK,
        {"content": b'{"category": "kv_memory_pressure", "note": "\\ud800"}'},
        ["body", "note"],
        "unstorable_text",
    ),
    (FEEDBACK, {"json": {"category": "cosmic_rays"}}, ["body", "category"], "unknown_category"),
    (
        FEEDBACK,
        {"json": {"category": "kv_memory_pressure", "hypotheses": [{"rank": 1, "correct": True}] * 2}},
        ["body", "hypotheses"],
        "duplicate_rank",
    ),
    (
        FEEDBACK,
        {"json": {"category": "kv_memory_pressure", "hypotheses": [{"rank": 1, "correct": True}]}},
        ["body", "hypotheses"],
        "unknown_rank",
    ),  # no finished investigation: it has no ranks yet
    (("GET", "/api/v1/stats/accuracy"), {"params": {"x": "\x00"}}, ["query", "x"], "unstorable_text"),
]


@pytest.mark.parametrize(
    ("operation", "request_", "loc", "type_"),
    SOURCES,
    ids=[f"{op[1].rsplit('/', 1)[-1]}-{t}" for op, _, _, t in SOURCES],
)
def test_every_422_source_answers_the_declared_shape(
    intake_client: TestClient, operation: tuple[str, str], request_: dict[str, Any], loc: list[str | int], type_: str
) -> None:
    method, template = operation
    incident = post_webhook(intake_client, make_payload("g", alerts=[make_alert("fp")])).json()["incident_id"]
    path = template.format(**({"incident_id": incident} | request_.get("path", {})))
    headers = WEBHOOK_AUTH if operation == WEBHOOK else API_AUTH
    if "content" in request_:
        headers = headers | {"Content-Type": "application/json"}
    reply = intake_client.request(
        method,
        path,
        params=request_.get("params"),
        json=request_.get("json"),
        content=request_.get("content"),
        headers=headers,
    )
    assert_documented(intake_client, reply, method, template)  # the operation's own declared 422
    [error] = field_errors(intake_client, reply)
    assert (error["loc"], error["type"]) == (loc, type_), error
    assert error["msg"] and "\n" not in error["msg"]


def test_no_422_is_raised_in_another_shape() -> None:
    """A new check must use rca.api.errors.unprocessable, not an HTTPException with a string detail.
    The incident pages (rca/pages) answer a bad form with its HTML page again, not JSON."""
    offenders = [
        f"{path.name}: {line.strip()}"
        for path in sorted((REPO / "rca").rglob("*.py"))
        if "pages" not in path.relative_to(REPO / "rca").parts
        for line in path.read_text().splitlines()
        if "422" in line and "HTTPException" in line or "HTTP_422" in line
    ]
    assert not offenders, offenders


def test_a_webhook_with_many_bad_alerts_lists_the_first_twenty(intake_client: TestClient) -> None:
    alerts = [make_alert(f"fp-{n}") | {"startsAt": "yesterday"} for n in range(50)]
    reply = post_webhook(intake_client, make_payload("g", alerts=alerts))
    errors = field_errors(intake_client, reply)
    assert [e["loc"] for e in errors] == [["body", "alerts", n, "startsAt"] for n in range(20)]
    assert all("input" not in e for e in errors)  # a 1 MiB payload is not echoed back
