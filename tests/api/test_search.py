"""History search (`GET /api/v1/incidents`): full text over titles, alerts, labels, annotations,
findings and hypotheses on both backends (Postgres tsvector, SQLite FTS5), the history filters,
relevance and time order, cursor pages that stay stable while incidents arrive, and 422s."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.helpers.errors import field_errors, only_error
from tests.helpers.history import finish_investigation
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import API_AUTH, WEBHOOK_AUTH


def search(client: TestClient, **params: Any) -> dict[str, Any]:
    reply = client.get("/api/v1/incidents", params=params, headers=API_AUTH)
    assert reply.status_code == 200, reply.text
    return reply.json()


def ids(page: dict[str, Any]) -> list[int]:
    return [item["id"] for item in page["items"]]


def open_incident(client: TestClient, group: str, *alerts: dict[str, Any]) -> int:
    reply = post_webhook(client, make_payload(group, alerts=list(alerts)))
    assert reply.status_code == 200, reply.text
    return reply.json()["incident_id"]


def db_url_of(client: TestClient) -> str:
    return client.app.state.settings.effective_database_url


def test_full_text_finds_words_in_titles_labels_annotations_findings_and_hypotheses(intake_client: TestClient) -> None:
    kv = open_incident(intake_client, "kv", make_alert("fp-kv", alertname="KVCacheHigh", model_name="llama"))
    queue = open_incident(intake_client, "queue", make_alert("fp-q", alertname="QueueHigh", model_name="qwen"))
    finish_investigation(
        db_url_of(intake_client), kv, ["kv_cache_usage", "preemption_rate"], ["kv_memory_pressure", "arrival_surge"]
    )

    assert ids(search(intake_client, q="KVCacheHigh")) == [kv]  # alert name (and annotation summary)
    assert ids(search(intake_client, q="qwen")) == [queue]  # a label value
    assert ids(search(intake_client, q="preemption")) == [kv]  # a finding key/title
    assert ids(search(intake_client, q="memory pressure suspected")) == [kv]  # a hypothesis title
    assert ids(search(intake_client, q="gpu-node-1")) == [queue, kv]  # instance label, both
    assert search(intake_client, q="llama qwen")["items"] == []  # every word must match
    assert search(intake_client, q="nothing-like-this")["total"] == 0


def test_stemming_matches_other_forms_of_a_word(intake_client: TestClient) -> None:
    inc = open_incident(intake_client, "pre", make_alert("fp-p", alertname="PreemptionsHigh"))
    finish_investigation(db_url_of(intake_client), inc, ["preemption_rate"], ["kv_memory_pressure"])
    assert ids(search(intake_client, q="preemptions")) == [inc]
    assert ids(search(intake_client, q="pressures")) == [inc]


def test_relevance_puts_the_better_match_first_and_time_sort_ignores_it(intake_client: TestClient) -> None:
    strong = open_incident(intake_client, "s", make_alert("fp-s", alertname="KVCacheHigh", note="kv cache kv cache"))
    weak = open_incident(intake_client, "w", make_alert("fp-w", alertname="QueueHigh", note="cache"))
    relevance = search(intake_client, q="cache")
    assert relevance["sort"] == "relevance" and ids(relevance) == [strong, weak]
    assert relevance["items"][0]["score"] > relevance["items"][1]["score"] > 0
    assert ids(search(intake_client, q="cache", sort="time")) == [weak, strong]


def test_filters_by_breached_signal_category_and_confirmation(intake_client: TestClient) -> None:
    url = db_url_of(intake_client)
    kv = open_incident(intake_client, "kv", make_alert("fp-kv"))
    surge = open_incident(intake_client, "surge", make_alert("fp-s"))
    pending = open_incident(intake_client, "pending", make_alert("fp-p"))
    finish_investigation(url, kv, ["kv_cache_usage", "preemption_rate"], ["kv_memory_pressure", "arrival_surge"])
    finish_investigation(url, surge, ["request_rate", "queue_time_p95"], ["arrival_surge"])
    reply = intake_client.post(
        f"/api/v1/incidents/{surge}/feedback",
        headers=API_AUTH,
        json={"category": "arrival_surge", "note": "marketing launch"},
    )
    assert reply.status_code == 201, reply.text

    assert ids(search(intake_client, signal="kv_cache_usage")) == [kv]
    assert ids(search(intake_client, signal=["kv_cache_usage", "request_rate"])) == []
    assert ids(search(intake_client, signal="queue_time_p95")) == [surge]
    assert ids(search(intake_client, category="arrival_surge")) == [surge]  # the top cause only
    assert ids(search(intake_client, confirmed="true")) == [surge]
    assert ids(search(intake_client, confirmed="false")) == [pending, kv]
    assert ids(search(intake_client, confirmed_category="arrival_surge")) == [surge]
    assert ids(search(intake_client, q="marketing")) == [surge]  # the engineer's note is searchable
    [item] = search(intake_client, signal="kv_cache_usage")["items"]
    assert item["top_category"] == "kv_memory_pressure" and item["investigation_status"] == "done"
    assert item["breached"] == ["kv_cache_usage", "preemption_rate"] and item["confirmed_category"] is None


def test_full_text_combines_with_filters(intake_client: TestClient) -> None:
    a = open_incident(intake_client, "a", make_alert("fp-a", model_name="llama"))
    open_incident(intake_client, "b", make_alert("fp-b", model_name="qwen"))
    post_webhook(intake_client, make_payload("a", alerts=[make_alert("fp-a", status="resolved", model_name="llama")]))
    assert ids(search(intake_client, q="LLMRequestQueueMedianHigh", status="resolved")) == [a]
    assert ids(search(intake_client, q="LLMRequestQueueMedianHigh", label="model_name=llama")) == [a]
    assert search(intake_client, q="qwen", status="resolved")["total"] == 0


@pytest.mark.parametrize("sort", ["time", "relevance"])
def test_cursor_pages_are_stable_while_new_incidents_arrive(intake_client: TestClient, sort: str) -> None:
    first = [open_incident(intake_client, f"g{n}", make_alert(f"fp-{n}", note="disk " * (n + 1))) for n in range(5)]
    page = search(intake_client, q="disk", sort=sort, limit=2)
    seen = ids(page)
    cursor = page["next_cursor"]
    # Incidents arriving between pages match too, and would shift an offset-based page.
    better = open_incident(intake_client, "late-1", make_alert("fp-late-1", note="disk " * 9))
    weaker = open_incident(intake_client, "late-2", make_alert("fp-late-2", note="disk"))
    while cursor:
        page = search(intake_client, q="disk", sort=sort, limit=2, cursor=cursor)
        seen += ids(page)
        cursor = page["next_cursor"]
    expected = list(reversed(first))  # newest first, and also most "disk"s first
    assert len(seen) == len(set(seen)) and better not in seen  # nothing repeats; a page never moves back
    # Time: newer incidents sort before the cursor. Relevance: the search is a snapshot of the
    # matches that existed at its first page, so even a newcomer that ranks lower is left out.
    assert seen == expected and weaker not in seen


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"q": "!!! ???"}, "no searchable words"),
        ({"sort": "relevance"}, "needs a full-text query"),
        ({"sort": "best"}, "sort"),
        ({"confirmed": "maybe"}, "confirmed"),
        ({"q": "x" * 501}, "q"),
        ({"q": "disk\x00"}, "query parameter q: the NUL character"),
        ({"label": "model=\x00"}, "query parameter label: the NUL character"),
    ],
    ids=["no-words", "relevance-without-q", "bad-sort", "bad-bool", "q-too-long", "nul-in-q", "nul-in-label"],
)
def test_invalid_history_parameters_are_refused_with_422(
    intake_client: TestClient, params: dict[str, str], fragment: str
) -> None:
    reply = intake_client.get("/api/v1/incidents", params=params, headers=API_AUTH)
    assert fragment in str(field_errors(intake_client, reply))


def test_a_cursor_only_continues_the_search_it_came_from(intake_client: TestClient) -> None:
    for n in range(3):
        open_incident(intake_client, f"g{n}", make_alert(f"fp-{n}"))
    cursor = search(intake_client, limit=1)["next_cursor"]
    assert cursor
    for params in ({"status": "firing"}, {"q": "gpu", "sort": "time"}, {"q": "gpu"}):
        reply = intake_client.get(
            "/api/v1/incidents", params={"limit": 1, "cursor": cursor, **params}, headers=API_AUTH
        )
        only_error(intake_client, reply, ["query", "cursor"], "invalid_cursor", "other parameters")
    tampered = cursor[:-4] + ("AAAA" if not cursor.endswith("AAAA") else "BBBB")
    reply = intake_client.get("/api/v1/incidents", params={"limit": 1, "cursor": tampered}, headers=API_AUTH)
    only_error(intake_client, reply, ["query", "cursor"], "invalid_cursor", "invalid cursor")


@pytest.mark.parametrize(
    ("member", "forged"),
    [("i", "Infinity"), ("i", "1e999"), ("i", "NaN"), ("s", "NaN"), ("s", '"-inf"'), ("s", "1e999")],
)
def test_a_cursor_with_a_number_that_is_no_number_is_refused_not_a_server_error(
    intake_client: TestClient, member: str, forged: str
) -> None:
    """Found by the fuzzer (tests/api/test_fuzz.py): an id of Infinity was a 500 (OverflowError), and a
    NaN score an empty page instead of a refusal."""
    for n in range(3):
        open_incident(intake_client, f"g{n}", make_alert(f"fp-{n}"))
    params = {"limit": "1", "q": "gpu"}
    cursor = search(intake_client, **params)["next_cursor"]
    data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    text = json.dumps({**data, member: "@"}).replace('"@"', forged)
    reply = intake_client.get(
        "/api/v1/incidents",
        params={**params, "cursor": base64.urlsafe_b64encode(text.encode()).decode()},
        headers=API_AUTH,
    )
    only_error(intake_client, reply, ["query", "cursor"], "invalid_cursor", "not a cursor returned by this API")


@pytest.mark.parametrize("bad", [r"\u0000", r"\ud800"], ids=["nul", "lone-surrogate"])
def test_text_the_database_cannot_store_is_refused_and_nothing_is_stored(intake_client: TestClient, bad: str) -> None:
    """Found by the schemathesis fuzzing (tests/api/test_openapi.py): Postgres refused these with a 500."""
    body = json.dumps(make_payload("g", alerts=[make_alert("fp")])).replace('"llm-rca"', f'"llm-rca{bad}"')
    reply = intake_client.post(
        "/api/v1/alertmanager", content=body, headers={**WEBHOOK_AUTH, "Content-Type": "application/json"}
    )
    only_error(intake_client, reply, ["body", "receiver"], "unstorable_text")
    assert search(intake_client)["total"] == 0


def test_relevance_ranks_only_the_newest_window_of_matches(
    intake_client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rca.store import incidents as incident_store

    monkeypatch.setattr(incident_store, "RELEVANCE_WINDOW", 3)
    oldest_best = open_incident(intake_client, "old", make_alert("fp-old", note="disk " * 9))
    newer = [open_incident(intake_client, f"n{n}", make_alert(f"fp-n{n}", note="disk " * (n + 1))) for n in range(3)]
    relevance = search(intake_client, q="disk")
    assert ids(relevance) == list(reversed(newer))  # the best match is older than the newest three
    assert oldest_best in ids(search(intake_client, q="disk", sort="time"))


def test_total_is_known_from_a_complete_first_page_and_otherwise_counted_on_request(intake_client: TestClient) -> None:
    for n in range(3):
        open_incident(intake_client, f"g{n}", make_alert(f"fp-{n}", note="disk"))
    whole = search(intake_client, q="disk", limit=5)
    assert (whole["total"], whole["total_exact"], whole["next_cursor"]) == (3, True, None)
    partial = search(intake_client, q="disk", limit=2)
    assert (partial["total"], partial["total_exact"]) == (None, False) and partial["next_cursor"]
    counted = search(intake_client, q="disk", limit=2, total="true")
    assert (counted["total"], counted["total_exact"]) == (3, True)
    later = search(intake_client, q="disk", limit=2, cursor=partial["next_cursor"], total="true")
    assert (later["total"], ids(later)) == (3, ids(whole)[2:])


def test_counting_stops_at_the_cap(intake_client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from rca.queries import incidents as queries

    monkeypatch.setattr(queries, "TOTAL_CAP", 2)
    for n in range(4):
        open_incident(intake_client, f"g{n}", make_alert(f"fp-{n}"))
    page = search(intake_client, limit=1, total="true")
    assert (page["total"], page["total_exact"]) == (2, False)


def test_times_with_no_utc_year_are_refused_not_a_server_error(intake_client: TestClient) -> None:
    import base64

    open_incident(intake_client, "g", make_alert("fp"))
    reply = intake_client.get("/api/v1/incidents", params={"since": "0001-01-01T00:00:00+02:00"}, headers=API_AUTH)
    only_error(intake_client, reply, ["query", "since"], "datetime_out_of_range", "since is out of range")
    reply = intake_client.get("/api/v1/incidents", params={"until": "9999-12-31T23:00:00-05:00"}, headers=API_AUTH)
    only_error(intake_client, reply, ["query", "until"], "datetime_out_of_range", "until is out of range")
    forged = {"o": "time", "f": "", "t": "0001-01-01T00:00:00+02:00", "i": 1, "s": None, "a": None}
    token = base64.urlsafe_b64encode(json.dumps(forged).encode()).decode().rstrip("=")
    reply = intake_client.get("/api/v1/incidents", params={"cursor": token}, headers=API_AUTH)
    only_error(intake_client, reply, ["query", "cursor"], "invalid_cursor", "not a cursor returned by this API")
