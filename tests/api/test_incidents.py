"""The search API (`GET /api/v1/incidents[/{id}]`), health and readiness. Incidents are created
through the real webhook; investigations run on the real in-process dispatcher where the test
needs their results."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rca.api.app import create_app
from rca.collect.profile import DEFAULT_PROFILE, load_profile
from rca.domain.factor import CommonFactor, Verdict
from rca.signals.slo import KEY as SLO_KEY
from rca.store.db import session_scope
from rca.store.models import InvestigationRow
from rca.traces.findings import SUMMARY_KEY as TRACES_KEY
from tests.fakes.prometheus import StubPrometheus
from tests.helpers.brokers import CLOSED_PORT_BROKER_URL
from tests.helpers.databases import CLOSED_PORT_DATABASE_URL
from tests.helpers.errors import assert_documented, field_errors, only_error
from tests.helpers.history import finish_blind, finish_investigation
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import API_AUTH, API_TOKEN, RecordingDispatcher, make_settings, wait_for_investigation

SIGNAL_IDS = {spec.id for spec in load_profile(DEFAULT_PROFILE).signals}
# One finding per profile signal, plus the SLO model built from two of them, plus the traces' one
# (no trace backend configured here, so it says so).
FINDING_IDS = SIGNAL_IDS | {SLO_KEY, TRACES_KEY}
# Container (cAdvisor) signals: the test alerts name no pod, so these have no selector.
POD_ONLY_IDS = {
    spec.id
    for spec in load_profile(DEFAULT_PROFILE).signals
    if spec.scope == "pod" and all(q.scope in (None, "pod") for q in spec.queries)
}


def search(client: TestClient, **params: Any) -> dict[str, Any]:
    reply = client.get("/api/v1/incidents", params=params, headers=API_AUTH)
    assert reply.status_code == 200, reply.text
    return reply.json()


def incident_of(client: TestClient, incident_id: int) -> dict[str, Any]:
    reply = client.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH)
    assert reply.status_code == 200, reply.text
    found: dict[str, Any] = reply.json()
    return found


def open_incident(client: TestClient, group: str, *alerts: dict[str, Any]) -> int:
    reply = post_webhook(client, make_payload(group, alerts=list(alerts)))
    assert reply.status_code == 200, reply.text
    return reply.json()["incident_id"]


# --------------------------------------------------------------------------- authentication


@pytest.mark.parametrize("path", ["/api/v1/incidents", "/api/v1/incidents/1"])
@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        ({}, "missing credentials"),
        ({"Authorization": "Bearer wrong"}, "invalid API token"),
        ({"Authorization": "Basic YXBpOmFwaS1zZWNyZXQtZm9yLXRlc3Rz"}, "missing credentials"),  # api:<token>
    ],
    ids=["none", "wrong-bearer", "basic"],
)
def test_search_api_requires_a_valid_bearer_token(
    intake_client: TestClient, path: str, headers: dict[str, str], fragment: str
) -> None:
    open_incident(intake_client, "g", make_alert("fp-a"))
    reply = intake_client.get(path, headers=headers)
    assert reply.status_code == 401, reply.text
    assert fragment in reply.json()["detail"]
    assert reply.headers["www-authenticate"] == "Bearer"
    assert "items" not in reply.json()


def test_every_configured_api_token_is_accepted(db_url: str, tmp_path: Path) -> None:
    settings = make_settings(db_url, tmp_path, api_tokens=f"first-token, {API_TOKEN}")
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        for token in ("first-token", API_TOKEN):
            assert client.get("/api/v1/incidents", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert client.get("/api/v1/incidents", headers={"Authorization": "Bearer first"}).status_code == 401


# --------------------------------------------------------------------------- search


def test_incidents_are_listed_newest_first(intake_client: TestClient) -> None:
    ids = [open_incident(intake_client, f"group-{n}", make_alert(f"fp-{n}")) for n in range(4)]
    page = search(intake_client)
    assert [item["id"] for item in page["items"]] == list(reversed(ids))
    assert page["total"] == 4 and page["next_cursor"] is None and page["sort"] == "time"
    first = page["items"][-1]
    assert first["status"] == "firing" and first["investigation_status"] == "queued"
    assert first["notification_count"] == 1 and first["alertname"] == "LLMRequestQueueMedianHigh"


def test_search_filters_by_status(intake_client: TestClient) -> None:
    still_firing = open_incident(intake_client, "a", make_alert("fp-a"))
    resolved = open_incident(intake_client, "b", make_alert("fp-b"))
    post_webhook(intake_client, make_payload("b", alerts=[make_alert("fp-b", status="resolved")]))

    assert [i["id"] for i in search(intake_client, status="firing")["items"]] == [still_firing]
    [item] = search(intake_client, status="resolved")["items"]
    assert item["id"] == resolved and item["resolved_at"] is not None
    assert search(intake_client)["total"] == 2
    reply = intake_client.get("/api/v1/incidents", params={"status": "open"}, headers=API_AUTH)
    only_error(intake_client, reply, ["query", "status"], "literal_error")


def test_search_filters_by_alertname_of_any_alert_in_the_incident(intake_client: TestClient) -> None:
    kv = open_incident(intake_client, "kv", make_alert("fp-kv", alertname="KVCacheHigh"))
    mixed = open_incident(
        intake_client, "mixed", make_alert("fp-q", alertname="QueueHigh"), make_alert("fp-k2", alertname="KVCacheHigh")
    )
    open_incident(intake_client, "queue", make_alert("fp-q2", alertname="QueueHigh"))

    page = search(intake_client, alertname="KVCacheHigh")
    assert [i["id"] for i in page["items"]] == [mixed, kv] and page["total"] == 2
    assert search(intake_client, alertname="NoSuchAlert") == {
        "items": [],
        "total": 0,
        "total_exact": True,
        "limit": 50,
        "sort": "time",
        "next_cursor": None,
    }


def test_search_filters_by_alert_labels_and_ands_repeated_filters(intake_client: TestClient) -> None:
    one = open_incident(intake_client, "one", make_alert("fp-1", instance="gpu-node-1:8000", model_name="llama"))
    two = open_incident(intake_client, "two", make_alert("fp-2", instance="gpu-node-2:8000", model_name="llama"))
    open_incident(intake_client, "three", make_alert("fp-3", instance="gpu-node-2:8000", model_name="qwen"))

    assert [i["id"] for i in search(intake_client, label="model_name=llama")["items"]] == [two, one]
    both = search(intake_client, label=["model_name=llama", "instance=gpu-node-2:8000"])
    assert [i["id"] for i in both["items"]] == [two] and both["total"] == 1
    assert search(intake_client, label="model_name=mistral")["total"] == 0
    assert search(intake_client, label="missing_label=llama")["total"] == 0
    # a value may itself contain '=' (only the first one separates name from value)
    eq = open_incident(intake_client, "eq", make_alert("fp-eq", selector="a=b"))
    assert [i["id"] for i in search(intake_client, label="selector=a=b")["items"]] == [eq]


@pytest.mark.parametrize("bad", ["model_name", "=llama", ""])
def test_malformed_label_filter_is_refused_with_422(intake_client: TestClient, bad: str) -> None:
    reply = intake_client.get("/api/v1/incidents", params={"label": bad}, headers=API_AUTH)
    only_error(intake_client, reply, ["query", "label"], "invalid_label_filter", "name=value")


def test_search_filters_by_creation_time_window(intake_client: TestClient) -> None:
    early = open_incident(intake_client, "early", make_alert("fp-e"))
    time.sleep(0.02)
    between = datetime.now(UTC)
    time.sleep(0.02)
    late = open_incident(intake_client, "late", make_alert("fp-l"))

    assert [i["id"] for i in search(intake_client, since=between.isoformat())["items"]] == [late]
    assert [i["id"] for i in search(intake_client, until=between.isoformat())["items"]] == [early]
    hour = timedelta(hours=1)
    window = search(intake_client, since=(between - hour).isoformat(), until=(between + hour).isoformat())
    assert window["total"] == 2
    assert search(intake_client, since=(between + hour).isoformat())["total"] == 0


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"since": "2026-12-03T10:00:00+00:00", "until": "2026-12-03T10:00:00+00:00"}, "since must be before until"),
        ({"since": "2026-12-03T11:00:00+00:00", "until": "2026-12-03T10:00:00+00:00"}, "since must be before until"),
        ({"since": "2026-12-03T10:00:00"}, "timezone"),
        ({"limit": "0"}, "limit"),
        ({"limit": "201"}, "limit"),
        ({"cursor": "not-a-cursor"}, "invalid cursor"),
    ],
    ids=["equal", "reversed", "naive", "limit-0", "limit-too-big", "garbage-cursor"],
)
def test_invalid_search_parameters_are_refused_with_422(
    intake_client: TestClient, params: dict[str, str], fragment: str
) -> None:
    reply = intake_client.get("/api/v1/incidents", params=params, headers=API_AUTH)
    assert fragment in str(field_errors(intake_client, reply))


def test_search_pages_through_results_with_next_cursor(intake_client: TestClient) -> None:
    ids = [open_incident(intake_client, f"page-{n}", make_alert(f"fp-{n}")) for n in range(5)]
    newest_first = list(reversed(ids))

    seen, cursor, pages = [], None, 0
    while True:
        page = search(intake_client, limit=2, total="true", **({"cursor": cursor} if cursor else {}))
        assert page["total"] == 5 and page["total_exact"] and page["limit"] == 2
        seen += [item["id"] for item in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == newest_first and pages == 3
    assert search(intake_client, limit=5)["next_cursor"] is None


def test_unknown_incident_is_404(intake_client: TestClient) -> None:
    known = open_incident(intake_client, "g", make_alert("fp-a"))
    reply = intake_client.get(f"/api/v1/incidents/{known + 1000}", headers=API_AUTH)
    assert reply.status_code == 404
    assert reply.json()["detail"] == f"incident {known + 1000} not found"
    assert intake_client.get(f"/api/v1/incidents/{known}", headers=API_AUTH).status_code == 200


# --------------------------------------------------------------------------- detail, with real investigations


def test_incident_detail_has_alerts_findings_hypotheses_and_the_finished_investigation(
    db_url: str, tmp_path: Path, prometheus: StubPrometheus
) -> None:
    settings = make_settings(db_url, tmp_path, prometheus_url=prometheus.url)
    with TestClient(create_app(settings)) as client:  # the real InlineDispatcher
        incident_id = open_incident(
            client, "detail", make_alert("fp-a", model_name="llama"), make_alert("fp-b", model_name="llama")
        )
        incident = wait_for_investigation(client, incident_id)
        listed = search(client)["items"][0]

    assert incident["id"] == incident_id and incident["status"] == "firing"
    assert {a["fingerprint"] for a in incident["alerts"]} == {"fp-a", "fp-b"}
    assert all(a["labels"]["instance"] == "gpu-node-1:8000" for a in incident["alerts"])

    inv = incident["investigation"]
    assert inv["status"] == "done", inv["error"]
    assert inv["attempts"] == 1 and inv["error"] is None
    assert inv["started_at"] <= inv["finished_at"]
    assert inv["target"]["host"] == "gpu-node-1" and inv["target"]["labels"]["model_name"] == "llama"
    assert incident["investigations"] == [inv]
    assert (inv["host"], inv["round_id"], incident["fleet"]) == (None, None, None)  # one host: one target

    findings = inv["findings"]
    assert {f["id"] for f in findings} == FINDING_IDS
    [slo] = [f for f in findings if f["id"] == SLO_KEY]
    assert slo["status"] == "ok" and slo["value"] is None  # the stub's flat 0.5 s TTFT never breaks the SLO
    assert "no TTFT SLO violation" in slo["detail"]
    assert all(q in prometheus.queries for q in slo["query"].split("\n"))
    for finding in (f for f in findings if f["id"] in POD_ONLY_IDS):
        assert finding["status"] == "unavailable" and "no pod series match this target" in finding["detail"]
    [traces] = [f for f in findings if f["id"] == TRACES_KEY]
    assert traces["status"] == "unavailable" and "no trace backend configured" in traces["detail"]
    for finding in (f for f in findings if f["id"] not in POD_ONLY_IDS | {SLO_KEY, TRACES_KEY}):
        assert finding["status"] in ("ok", "breached"), finding
        assert finding["value"] == pytest.approx(float(StubPrometheus.VALUE))
        assert finding["query"] and finding["query"] in prometheus.queries
        assert "gpu-node-1" in finding["query"]
        assert finding["source"]

    # Partial evidence: a diagnosis that names what it could not check (the pod's signals, the traces).
    missing = sorted(POD_ONLY_IDS | {TRACES_KEY})
    assert inv["inconclusive_reason"] is None
    assert inv["data_gap"].startswith(f"{len(missing)} of {len(FINDING_IDS)} signals had no data and were not checked")
    assert all(key in inv["data_gap"] for key in missing[:5])

    hypotheses = inv["hypotheses"]
    assert hypotheses, "a done investigation always ranks at least one cause"
    assert [h["rank"] for h in hypotheses] == list(range(1, len(hypotheses) + 1))
    cited = {key for h in hypotheses for key in h["evidence"] + h["contradicting"]}
    assert cited <= SIGNAL_IDS
    assert (listed["investigation_status"], listed["inconclusive_reason"]) == ("done", None)
    assert listed["top_category"] == hypotheses[0]["category"]
    assert listed["top_confidence"] == pytest.approx(hypotheses[0]["confidence"])


def test_a_group_of_three_hosts_runs_an_investigation_per_host_each_on_its_own_series(
    db_url: str, tmp_path: Path, prometheus: StubPrometheus
) -> None:
    settings = make_settings(db_url, tmp_path, prometheus_url=prometheus.url)
    hosts = ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
    with TestClient(create_app(settings)) as client:  # the real InlineDispatcher: its pool runs them
        incident_id = open_incident(
            client, "fleet", *(make_alert(f"fp-{host}", instance=f"{host}:8000", pod=f"vllm-{host}") for host in hosts)
        )
        incident = wait_for_investigation(client, incident_id)

    investigations = incident["investigations"]
    assert [inv["host"] for inv in investigations] == hosts
    assert {inv["round_id"] for inv in investigations} == {investigations[0]["id"]}
    for inv in investigations:
        assert inv["status"] == "done", inv["error"]
        others = [host for host in hosts if host != inv["host"]]
        assert inv["target"]["host"] == inv["host"] and inv["target"]["labels"]["pod"] == f"vllm-{inv['host']}"
        queries = [f["query"] for f in inv["findings"] if f["status"] in ("ok", "breached") and f["source"] != "slo"]
        assert queries and all(inv["host"] in q and not any(o in q for o in others) for q in queries)
    fleet = incident["fleet"]
    assert fleet["round_id"] == investigations[0]["id"] and fleet["skipped"] == 0
    # the stub serves every host the same flat series: nothing explains it, on all three alike,
    # which is no cause shared by the fleet
    [cause] = fleet["causes"]
    assert [h["host"] for h in cause["hosts"]] == hosts and cause["category"] == "no_clear_cause"
    assert fleet["fleet_wide"] is None
    line, factor = fleet["summary"]
    assert line.startswith("no_clear_cause on 3 hosts (gpu-node-1..3), confidence ")
    # the stub's series name no serving instance: no healthy peer to compare the three with, and
    # no factor claimed (judged once, by the round's first)
    assert factor == "Common factor cannot be judged: no healthy peers of the 3 affected hosts to compare with"
    assert fleet["common_factor"]["verdict"] == "unjudged" and fleet["common_factor"]["attribute"] is None


def open_fleet(client: TestClient, hosts: list[str]) -> tuple[int, list[int]]:
    """A fleet incident whose alert group names `hosts`, and its round's investigations' ids."""
    incident_id = open_incident(client, "fleet", *(make_alert(f"fp-{h}", instance=f"{h}:8000") for h in hosts))
    return incident_id, [inv["id"] for inv in incident_of(client, incident_id)["investigations"]]


def test_the_fleet_view_counts_a_blind_host_apart_and_claims_no_fleet_wide_cause(
    intake_client: TestClient, db_url: str
) -> None:
    hosts = [f"gpu-node-{n}" for n in range(1, 5)]
    incident_id, ids = open_fleet(intake_client, hosts)
    for investigation_id in ids[:3]:
        finish_investigation(
            db_url, incident_id, ["request_rate"], ["arrival_surge"], investigation_id=investigation_id
        )
    finish_blind(db_url, incident_id, investigation_id=ids[3])

    fleet = incident_of(intake_client, incident_id)["fleet"]
    assert fleet["fleet_wide"] is None
    assert fleet["causes"] == [
        {"category": "arrival_surge", "hosts": [{"host": h, "confidence": 0.8} for h in hosts[:3]]}
    ]
    assert (fleet["inconclusive"], fleet["failed"], fleet["unfinished"]) == (["gpu-node-4"], [], [])
    assert fleet["summary"] == [
        "arrival_surge on 3 hosts (gpu-node-1..3), confidence 0.80",
        "no cause readable (inconclusive): 1 host (gpu-node-4)",
    ]


def test_the_fleet_view_shows_the_common_factor_its_round_judged_with_its_counts(
    intake_client: TestClient, db_url: str
) -> None:
    incident_id, ids = open_fleet(intake_client, [f"gpu-node-{n}" for n in range(1, 4)])
    assert incident_of(intake_client, incident_id)["fleet"]["common_factor"] is None  # not judged yet
    image = "vllm/vllm-openai:v0.12.1"
    factor = CommonFactor(Verdict.FOUND, 3, 3, "image", image, 3, 3, 0, 3, 40, "roll back")
    with session_scope(db_url) as session:  # as the round's first investigation stores it
        row = session.get(InvestigationRow, ids[0])
        assert row is not None
        row.common_factor = factor.to_dict()

    fleet = incident_of(intake_client, incident_id)["fleet"]
    line = f"Common factor: image {image}: 3 of 3 affected, 0 of 3 healthy; rolled out 40 min before onset: roll back"
    assert fleet["common_factor"] == {
        "verdict": "found",
        "attribute": "image",
        "value": image,
        "affected": 3,
        "affected_of": 3,
        "healthy": 0,
        "healthy_of": 3,
        "affected_hosts": 3,
        "healthy_hosts": 3,
        "rollout_minutes": 40,
        "next_step": "roll back",
        "line": line,
    }
    assert fleet["summary"][-1] == line


def test_without_prometheus_the_investigation_is_inconclusive_and_shows_no_cause(db_url: str, tmp_path: Path) -> None:
    """Issue 32.1: a blind investigation ended `done` with `no_clear_cause` 20 %; now it has its own
    outcome, with its reason, and no cause anywhere: the incident, the list, the accuracy figures."""
    with TestClient(create_app(make_settings(db_url, tmp_path))) as client:
        incident_id = open_incident(client, "noprom", make_alert("fp-a"))
        incident = wait_for_investigation(client, incident_id)
        listed = search(client)["items"]
        feedback = {"category": "kv_memory_pressure", "note": "it was the KV cache"}
        assert client.post(f"/api/v1/incidents/{incident_id}/feedback", json=feedback, headers=API_AUTH).is_success
        accuracy = client.get("/api/v1/stats/accuracy", headers=API_AUTH).json()
        by_cause = search(client, category="no_clear_cause")["items"]

    inv = incident["investigation"]
    assert (inv["status"], inv["inconclusive_reason"]) == ("inconclusive", "no_prometheus")
    assert inv["hypotheses"] == [] and inv["margin"] is None and inv["analyst"] is None
    assert inv["data_gap"].startswith("Could not investigate: no Prometheus configured (set RCA_PROMETHEUS_URL)")
    assert "RCA_PROMETHEUS_URL" in inv["error"]
    assert {f["id"] for f in inv["findings"]} == FINDING_IDS  # what it tried to read stays, each saying why not
    assert all(f["status"] == "unavailable" and f["detail"].startswith("data unavailable") for f in inv["findings"])
    [item] = listed
    assert (item["investigation_status"], item["inconclusive_reason"]) == ("inconclusive", "no_prometheus")
    assert item["top_category"] is None and item["top_confidence"] is None and item["breached"] == []
    assert by_cause == []
    assert accuracy["undiagnosed"] == 1 and accuracy["overall"]["confirmed"] == 0 and accuracy["by_analyst"] == {}


def test_an_unreachable_or_empty_prometheus_makes_inconclusive_investigations_saying_why(
    pg_db: str, tmp_path: Path
) -> None:
    """The other two blind reasons: Prometheus does not answer (a closed port), or it answers with no
    series for the target (a real Prometheus that scrapes nothing of it)."""
    from tests.e2e import promstack

    unreachable = f"http://127.0.0.1:{promstack.free_port()}"
    proc, empty = promstack.start_prometheus(tmp_path, promstack.free_port(), None)
    try:
        found = {}
        for name, url in (("unreachable", unreachable), ("empty", empty)):
            with TestClient(create_app(make_settings(pg_db, tmp_path, prometheus_url=url))) as client:
                found[name] = wait_for_investigation(client, open_incident(client, name, make_alert(f"fp-{name}")))
    finally:
        proc.stop()
    down, nothing = (found[name]["investigation"] for name in ("unreachable", "empty"))
    assert (down["status"], down["inconclusive_reason"]) == ("inconclusive", "prometheus_unreachable")
    assert down["data_gap"].startswith(
        f"Could not investigate: Prometheus unreachable, so no metrics were read (Prometheus at {unreachable}"
    )
    assert (nothing["status"], nothing["inconclusive_reason"]) == ("inconclusive", "no_data")
    assert nothing["error"] is None and nothing["data_gap"].startswith("Could not investigate: no data for this target")
    assert any("series match this target" in f["detail"] for f in nothing["findings"])
    assert down["hypotheses"] == nothing["hypotheses"] == []


# --------------------------------------------------------------------------- health


def test_healthz_answers_without_credentials_or_dependencies(tmp_path: Path) -> None:
    settings = make_settings(CLOSED_PORT_DATABASE_URL, tmp_path, broker_url=CLOSED_PORT_BROKER_URL)
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        reply = client.get("/healthz")
    assert reply.status_code == 200 and reply.json() == {"status": "ok"}


def test_readyz_is_ready_with_real_postgres_redis_and_prometheus(pg_db: str, redis_url: str, tmp_path: Path) -> None:
    from tests.e2e import promstack

    proc, prometheus_url = promstack.start_prometheus(tmp_path, promstack.free_port(), None)
    try:
        settings = make_settings(pg_db, tmp_path, broker_url=redis_url, prometheus_url=prometheus_url)
        with TestClient(create_app(settings)) as client:
            reply = client.get("/readyz")
            assert_documented(client, reply, "GET", "/readyz")
    finally:
        proc.stop()
    assert reply.status_code == 200, reply.text
    checks = {"database": "ok", "broker": "ok", "queue": "celery", "prometheus": "ok"}
    assert reply.json() == {"status": "ready", "checks": checks}


@pytest.mark.parametrize("configured", [False, True])
def test_readyz_is_degraded_not_down_without_a_prometheus_that_answers(
    pg_db: str, tmp_path: Path, configured: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 32.1: /readyz said ready while every investigation was blind. Alerts are still taken
    and kept, so it stays 200 (in rotation), but says degraded and which check, never the URL."""
    from tests.e2e import promstack

    url = f"http://127.0.0.1:{promstack.free_port()}" if configured else None
    settings = make_settings(pg_db, tmp_path, prometheus_url=url)
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        reply = client.get("/readyz")
        assert_documented(client, reply, "GET", "/readyz")
    assert reply.status_code == 200, reply.text
    assert reply.json() == {
        "status": "degraded",
        "checks": {
            "database": "ok",
            "broker": "ok",
            "queue": "embedded (in-process)",
            "prometheus": "unavailable" if configured else "not configured",
        },
    }
    if configured:  # the operator learns why from the log, not from this unauthenticated answer
        assert "127.0.0.1" not in reply.text
        assert any(url in r.getMessage() and "unreachable" in r.getMessage() for r in caplog.records)


def test_readyz_is_not_ready_when_the_broker_is_down(pg_db: str, tmp_path: Path) -> None:
    settings = make_settings(pg_db, tmp_path, broker_url=CLOSED_PORT_BROKER_URL)
    with TestClient(create_app(settings)) as client:
        started = time.monotonic()
        reply = client.get("/readyz")
        elapsed = time.monotonic() - started
        assert_documented(client, reply, "GET", "/readyz")
    assert reply.status_code == 503, reply.text
    checks = reply.json()["checks"]
    assert reply.json()["status"] == "not ready"
    assert checks["database"] == "ok" and checks["broker"].startswith("unavailable")
    assert elapsed < 15


def test_readyz_is_not_ready_when_the_database_is_down(redis_url: str, tmp_path: Path) -> None:
    settings = make_settings(CLOSED_PORT_DATABASE_URL, tmp_path, broker_url=redis_url)
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        reply = client.get("/readyz")
        assert_documented(client, reply, "GET", "/readyz")
    assert reply.status_code == 503, reply.text
    assert reply.json()["checks"]["database"].startswith("unavailable")
    assert reply.json()["checks"]["broker"] == "ok"


def test_readyz_in_embedded_mode_needs_only_the_database(sqlite_url: str, tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(sqlite_url, tmp_path), dispatcher=RecordingDispatcher())) as client:
        reply = client.get("/readyz")
    assert reply.status_code == 200, reply.text
    assert reply.json()["checks"]["queue"] == "embedded (in-process)"


def test_search_with_the_database_down_answers_503_with_retry_after(tmp_path: Path) -> None:
    settings = make_settings(CLOSED_PORT_DATABASE_URL, tmp_path)
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        for path in ("/api/v1/incidents", "/api/v1/incidents/1"):
            reply = client.get(path, headers=API_AUTH)
            assert reply.status_code == 503, reply.text
            assert "database unavailable" in reply.json()["detail"]
            assert int(reply.headers["retry-after"]) > 0
