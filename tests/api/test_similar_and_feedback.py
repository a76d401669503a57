"""Similar incidents (`GET /api/v1/incidents/{id}/similar`), feedback
(`POST/GET /api/v1/incidents/{id}/feedback`) and `GET /api/v1/stats/accuracy`, on both backends,
with incidents created through the webhook and investigations saved through `save_result`."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import DataError, OperationalError
from sqlalchemy.orm import Session

from tests.helpers.errors import field_errors, only_error
from tests.helpers.history import finish_investigation
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import API_AUTH


def open_incident(client: TestClient, group: str) -> int:
    reply = post_webhook(client, make_payload(group, alerts=[make_alert(f"fp-{group}")]))
    assert reply.status_code == 200, reply.text
    return reply.json()["incident_id"]


def diagnosed(client: TestClient, group: str, breached: list[str], categories: list[str], **kw: Any) -> int:
    incident_id = open_incident(client, group)
    finish_investigation(client.app.state.settings.effective_database_url, incident_id, breached, categories, **kw)
    return incident_id


def similar(client: TestClient, incident_id: int, **params: Any) -> dict[str, Any]:
    reply = client.get(f"/api/v1/incidents/{incident_id}/similar", params=params, headers=API_AUTH)
    assert reply.status_code == 200, reply.text
    return reply.json()


def confirm(client: TestClient, incident_id: int, **body: Any) -> Any:
    return client.post(f"/api/v1/incidents/{incident_id}/feedback", json=body, headers=API_AUTH)


# --------------------------------------------------------------------------- similar


def test_similar_ranks_same_evidence_first_and_reports_the_confirmed_cause(intake_client: TestClient) -> None:
    same = diagnosed(intake_client, "same", ["prefix_cache_hit_rate", "ttft_p95"], ["prefix_cache_miss"])
    reordered = diagnosed(intake_client, "reordered", ["ttft_p95", "prefix_cache_hit_rate"], ["prefix_cache_miss"])
    other_stack = diagnosed(
        intake_client, "sglang", ["prefix_cache_hit_rate", "ttft_p95"], ["prefix_cache_miss"], stack="sglang"
    )
    partial = diagnosed(intake_client, "partial", ["prefix_cache_hit_rate", "queue_time_p95"], ["arrival_surge"])
    diagnosed(intake_client, "unrelated", ["kv_cache_usage"], ["kv_memory_pressure"])
    assert confirm(intake_client, same, category="prefix_cache_miss", note="router lost affinity").status_code == 201
    now = diagnosed(intake_client, "now", ["prefix_cache_hit_rate", "ttft_p95"], ["prefix_cache_miss"])

    page = similar(intake_client, now)
    assert page["breached"] == ["prefix_cache_hit_rate", "ttft_p95"] and page["stack"] == "vllm"
    assert page["onset_order"] == ["prefix_cache_hit_rate", "ttft_p95"] and page["categories"] == ["prefix_cache_miss"]
    ranked = [item["incident"]["id"] for item in page["items"]]
    # Same order on another stack beats the same set in the other order (order 0.2 > stack 0.15);
    # the unrelated incident shares nothing.
    assert ranked == [same, other_stack, reordered, partial]
    top = page["items"][0]
    assert top["score"] == 1.0 and top["confirmed_category"] == "prefix_cache_miss"
    assert top["shared_breached"] == ["prefix_cache_hit_rate", "ttft_p95"]
    assert page["items"][1]["confirmed_category"] is None
    assert 0 < page["items"][3]["score"] < page["items"][2]["score"] < page["items"][1]["score"] < 1
    assert [i["incident"]["id"] for i in similar(intake_client, now, limit=1)["items"]] == [same]


def test_similar_only_looks_back_in_time_and_needs_a_finished_investigation(intake_client: TestClient) -> None:
    first = diagnosed(intake_client, "first", ["kv_cache_usage"], ["kv_memory_pressure"])
    pending = open_incident(intake_client, "pending")
    diagnosed(intake_client, "later", ["kv_cache_usage"], ["kv_memory_pressure"])
    assert similar(intake_client, first)["items"] == []  # the later twin is not "before"
    assert similar(intake_client, pending)["items"] == []
    reply = intake_client.get("/api/v1/incidents/999999/similar", headers=API_AUTH)
    assert reply.status_code == 404 and reply.json()["detail"] == "incident 999999 not found"


# --------------------------------------------------------------------------- feedback


def test_feedback_is_stored_with_author_and_time_and_the_newest_counts(intake_client: TestClient) -> None:
    inc = diagnosed(intake_client, "kv", ["kv_cache_usage"], ["arrival_surge", "kv_memory_pressure"])
    first = confirm(
        intake_client,
        inc,
        category="kv_memory_pressure",
        note="too many long prompts",
        hypotheses=[{"rank": 1, "correct": False}, {"rank": 2, "correct": True}],
    )
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["author"] == "env-token-1" and body["category"] == "kv_memory_pressure"
    assert body["hypotheses"] == [{"rank": 1, "correct": False}, {"rank": 2, "correct": True}]
    assert body["investigation_id"] is not None and body["created_at"]
    second = confirm(intake_client, inc, category="batching_misconfig")
    assert second.status_code == 201
    history = intake_client.get(f"/api/v1/incidents/{inc}/feedback", headers=API_AUTH).json()
    assert [f["category"] for f in history] == ["kv_memory_pressure", "batching_misconfig"]
    [item] = intake_client.get("/api/v1/incidents", params={"confirmed": "true"}, headers=API_AUTH).json()["items"]
    assert item["confirmed_category"] == "batching_misconfig"


def test_bad_feedback_is_refused_and_stores_nothing(intake_client: TestClient) -> None:
    inc = diagnosed(intake_client, "kv", ["kv_cache_usage"], ["kv_memory_pressure"])
    cases = [
        ({"category": "cosmic_rays"}, "category", "unknown_category", "not a taxonomy id"),
        (
            {"category": "kv_memory_pressure", "hypotheses": [{"rank": 4, "correct": True}]},
            "hypotheses",
            "unknown_rank",
            "do not exist",
        ),
        (
            {"category": "kv_memory_pressure", "hypotheses": [{"rank": 1, "correct": True}] * 2},
            "hypotheses",
            "duplicate_rank",
            "only once",
        ),
        ({"category": "kv_memory_pressure", "who": "me"}, "who", "extra_forbidden", "Extra inputs"),
        ({"note": "no category"}, "category", "missing", "required"),
        ({"category": "kv_memory_pressure", "note": "a\x00b"}, "note", "unstorable_text", "NUL"),
    ]
    for body, field, type_, fragment in cases:
        only_error(intake_client, confirm(intake_client, inc, **body), ["body", field], type_, fragment)
    reply = intake_client.post(
        "/api/v1/incidents/999999/feedback", json={"category": "kv_memory_pressure"}, headers=API_AUTH
    )
    assert reply.status_code == 404
    assert intake_client.get(f"/api/v1/incidents/{inc}/feedback", headers=API_AUTH).json() == []


@pytest.mark.parametrize(
    ("body", "loc", "type_"),
    [
        (b'{"category": "kv_memory_pressure", "note": "\\ud800"}', ["body", "note"], "unstorable_text"),
        (b'{"category": "\\udfff"}', ["body", "category"], "unstorable_text"),
        (b'{"category": "kv_memory_pressure", "\\ud800": 1}', ["body"], "unstorable_text"),
        (
            b'{"category": "kv_memory_pressure", "hypotheses": [{"rank": NaN, "correct": true}]}',
            ["body", "hypotheses", 0, "rank"],
            "not_a_json_number",
        ),
        (
            b'{"category": "kv_memory_pressure", "hypotheses": [{"rank": 1e999, "correct": true}]}',
            ["body", "hypotheses", 0, "rank"],
            "number_out_of_range",
        ),
        (
            b'{"category": "kv_memory_pressure", "hypotheses": [{"rank": ' + b"1" * 5000 + b', "correct": true}]}',
            ["body", "hypotheses", 0, "rank"],
            "number_out_of_range",
        ),
        (
            b'{"category": "kv_memory_pressure", "note": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            ["body"],  # Python's decoder gave up before the depth could be walked
            "json_too_deep",
        ),
        (b'{"category": "kv_memory_pressure", "note": "\xff"}', ["body", 44], "json_invalid"),
    ],
    ids=[
        "surrogate-note",
        "surrogate-category",
        "surrogate-field-name",
        "NaN-rank",
        "1e999-rank",
        "5000-digit-rank",
        "5000-deep",
        "not-utf8",
    ],
)
def test_feedback_json_that_cannot_be_stored_or_decoded_is_422_at_its_field(
    intake_client: TestClient, body: bytes, loc: list[str | int], type_: str
) -> None:
    """Feedback bodies are decoded as strictly as the webhook's (rca/api/jsonbody.py). Before, FastAPI's
    handler could encode neither a lone surrogate nor a NaN in the refused input (a 500), and the
    fuzzer (tests/api/test_fuzz.py) found a deep array, a 5,000-digit number and bytes that are not
    UTF-8 answered with an undocumented 400 "There was an error parsing the body"."""
    inc = open_incident(intake_client, "unencodable")
    reply = intake_client.post(
        f"/api/v1/incidents/{inc}/feedback", content=body, headers=API_AUTH | {"Content-Type": "application/json"}
    )
    [error] = field_errors(intake_client, reply)
    assert (error["loc"], error["type"]) == (loc, type_), error
    assert intake_client.get(f"/api/v1/incidents/{inc}/feedback", headers=API_AUTH).json() == []


@pytest.mark.parametrize(
    "body", [b'{"category": "\xff"}', '{"category": "x"}'.encode("utf-16")], ids=["latin1", "utf16"]
)
def test_feedback_sent_as_text_that_is_not_utf8_is_422_not_a_500_from_the_error_handler(
    intake_client: TestClient, body: bytes
) -> None:
    """Found by the fuzzer (bench/fuzz_intake.py): FastAPI does not read a body of another
    Content-Type as JSON and echoes it, as bytes, in the 422; bytes that are not UTF-8 made the
    error handler itself fail with a 500."""
    inc = open_incident(intake_client, "text-plain")
    reply = intake_client.post(
        f"/api/v1/incidents/{inc}/feedback", content=body, headers=API_AUTH | {"Content-Type": "text/plain"}
    )
    [error] = field_errors(intake_client, reply)
    assert error["loc"] == ["body"] and error["type"] == "model_attributes_type", error
    assert "\\x" in error["input"]  # the bytes that are not UTF-8, escaped
    assert intake_client.get(f"/api/v1/incidents/{inc}/feedback", headers=API_AUTH).json() == []


def test_feedback_the_database_refuses_to_commit_is_answered_503_not_201(
    intake_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request's transaction commits before the response goes out: a commit that fails is the
    client's error to retry, never a 201 for feedback that was lost."""
    inc = diagnosed(intake_client, "kv", ["kv_cache_usage"], ["kv_memory_pressure"])

    def refuse(self: Session) -> None:
        raise OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))

    monkeypatch.setattr(Session, "commit", refuse)
    reply = confirm(intake_client, inc, category="kv_memory_pressure")
    monkeypatch.undo()
    assert reply.status_code == 503, reply.text
    assert intake_client.get(f"/api/v1/incidents/{inc}/feedback", headers=API_AUTH).json() == []


@pytest.mark.parametrize(
    ("error", "status", "fragment"),
    [
        (psycopg.errors.ProgramLimitExceeded("index row size 9000 exceeds maximum 2704"), 413, "database limit"),
        (
            psycopg.errors.StringDataRightTruncation("value too long for type character varying(64)"),
            422,
            "cannot store",
        ),
    ],
    ids=["program-limit", "data-exception"],
)
def test_feedback_the_database_refuses_for_good_is_a_4xx_not_a_503_to_retry(
    intake_client: TestClient, monkeypatch: pytest.MonkeyPatch, error: Exception, status: int, fragment: str
) -> None:
    """psycopg raises a program limit (SQLSTATE 54) as an OperationalError, like a lost connection:
    the SQLSTATE, not the class, says that a retry can never succeed."""
    inc = diagnosed(intake_client, "kv", ["kv_cache_usage"], ["kv_memory_pressure"])
    wrapper = OperationalError if isinstance(error, psycopg.OperationalError) else DataError

    def refuse(self: Session) -> None:
        raise wrapper("COMMIT", {}, error)

    monkeypatch.setattr(Session, "commit", refuse)
    reply = confirm(intake_client, inc, category="kv_memory_pressure")
    monkeypatch.undo()
    assert reply.status_code == status, reply.text
    assert "retry-after" not in reply.headers
    assert fragment in reply.text
    assert intake_client.get(f"/api/v1/incidents/{inc}/feedback", headers=API_AUTH).json() == []


# --------------------------------------------------------------------------- accuracy


def test_accuracy_reports_ac_at_1_and_3_per_category_and_analyst(intake_client: TestClient) -> None:
    def accuracy() -> dict[str, Any]:
        reply = intake_client.get("/api/v1/stats/accuracy", headers=API_AUTH)
        assert reply.status_code == 200, reply.text
        return reply.json()

    empty = accuracy()
    assert empty["overall"] == {"confirmed": 0, "ac_at_1": None, "ac_at_3": None} and empty["by_analyst"] == {}

    right = diagnosed(intake_client, "a", ["kv_cache_usage"], ["kv_memory_pressure", "arrival_surge"])
    third = diagnosed(intake_client, "b", ["request_rate"], ["batching_misconfig", "prefill_blocking", "arrival_surge"])
    wrong = diagnosed(intake_client, "c", ["kv_cache_usage"], ["arrival_surge", "batching_misconfig"])
    llm = diagnosed(intake_client, "d", ["kv_cache_usage"], ["kv_memory_pressure"], analyst="llm")
    diagnosed(intake_client, "unconfirmed", ["kv_cache_usage"], ["kv_memory_pressure"])
    for inc, cause in (
        (right, "kv_memory_pressure"),
        (third, "arrival_surge"),
        (wrong, "kv_memory_pressure"),
        (llm, "kv_memory_pressure"),
    ):
        assert confirm(intake_client, inc, category=cause).status_code == 201

    stats = accuracy()
    assert stats["overall"] == {"confirmed": 4, "ac_at_1": 0.5, "ac_at_3": 0.75}
    assert stats["by_analyst"] == {
        "llm": {"confirmed": 1, "ac_at_1": 1.0, "ac_at_3": 1.0},
        "rules": {"confirmed": 3, "ac_at_1": 0.3333, "ac_at_3": 0.6667},
    }
    assert stats["by_category"] == {
        "arrival_surge": {"confirmed": 1, "ac_at_1": 0.0, "ac_at_3": 1.0},
        "kv_memory_pressure": {"confirmed": 3, "ac_at_1": 0.6667, "ac_at_3": 0.6667},
    }
