"""What the pages tell of where an incident came from and what happened to it: the list's origin
column and filter (the API's `origin=`), an early warning's header (why the scan warned, the
signals that moved and their forecast) and the SLA alert that joined it, and a timeline with
every event the service records, Slack attempts included."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from rca.notify.service import deliver
from rca.pages.site import create_site
from rca.scan.fleet import ServingInstance
from rca.scan.forecast import Limit, SignalForecast
from rca.scan.states import Assessment, Policy, ScanState, TargetMemory, Transition
from rca.scan.warnings import Actions, record
from rca.store.db import session_scope
from rca.store.models import IncidentRow
from tests.fakes.slack import Failure, FakeSlack
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import API_AUTH, RecordingDispatcher
from tests.helpers.slack import slack_settings
from tests.pages.site import csrf_of, open_incident, sign_in

TARGET = ServingInstance("gpu-a:8000", "gpu-a", "gpu-a", "vllm", "vllm_v1")
QUEUE = Limit("queue_median", "Median waiting requests", "requests", ">", 4.7)
KV = Limit("kv_cache_usage", "KV cache usage", "ratio", ">", 0.95)
RULE = "rule LLMTTFTSLOBreach (group llm-serving, rules.yml)"
TTFT = Limit("ttft_p95", "TTFT p95 against its SLO", "seconds", ">", 1.0, latest=True, slo_source=RULE)


def warn(url: str) -> int:
    """The scan's move to `warning` for gpu-a, stored as the scan stores it: the early-warning
    incident it opens, and the transition with each signal's figures."""
    now = datetime.now(UTC).timestamp()
    assessment = Assessment(
        at=now,
        signals=[
            SignalForecast(QUEUE, "prometheus", 6.2, 1.1, 0.4, None, True, True, now - 600),  # beyond already
            SignalForecast(KV, "prometheus", 0.81, 0.42, 0.02, 420.0, False, True, now - 540),  # heading there
            # TTFT still within the operator's SLO, read from their rule: the page says which it was.
            SignalForecast(TTFT, "prometheus", 0.6, 0.55, 0.0, None, False, False, None),
            SignalForecast(
                Limit("gpu_util", "GPU utilisation", "ratio", "<", 0.1),
                "prometheus",
                0.9,
                0.9,
                0,
                None,
                False,
                False,
                None,
            ),
        ],
    )
    figures = {"signals": [s.figures() for s in assessment.signals], "slo_probability": 0.86}
    transition = Transition(
        ScanState.WATCH, ScanState.WARNING, now, "queue_median beyond threshold for 3 scans", figures
    )
    with session_scope(url) as session:
        memory = record(
            session, TARGET, transition, TargetMemory(), assessment, Policy(), owe_slack=False, actions=Actions()
        )
    assert memory.incident_id is not None
    return memory.incident_id


def test_an_early_warning_is_marked_filtered_and_tells_when_the_sla_alert_joined(
    client: TestClient, pg_db: str
) -> None:
    alert_incident = open_incident(client, pg_db)
    warning_id = warn(pg_db)
    with session_scope(pg_db) as session:
        incident = session.get(IncidentRow, warning_id)
        assert incident is not None
        warned_at = incident.created_at
    sla = make_alert(
        "fp-sla", alertname="LLMTTFTSLOBreach", instance="gpu-a:8000", starts_at=warned_at + timedelta(minutes=9)
    )
    joined = post_webhook(client, make_payload('{}:{alertname="LLMTTFTSLOBreach"}', alerts=[sla]))
    assert joined.status_code == 200 and joined.json()["incident_id"] == warning_id, joined.text

    # The list: each incident's origin, and the API's origin filter.
    rows = {"alertmanager": f'data-incident="{alert_incident}"', "early_warning": f'data-incident="{warning_id}"'}
    listed = client.get("/", headers=API_AUTH).text
    for origin, row in rows.items():
        cell = re.search(row + r'>.*?<td class="origin-cell">(.*?)</td>', listed, re.S)
        assert cell, origin
        assert ("early warning" in cell.group(1)) == (origin == "early_warning"), cell.group(1)
    for origin, row in rows.items():
        filtered = client.get("/", params={"origin": origin}, headers=API_AUTH).text
        assert row in filtered and all(other not in filtered for o, other in rows.items() if o != origin), origin
        assert f'<option value="{origin}" selected>' in filtered
        api = client.get("/api/v1/incidents", params={"origin": origin}, headers=API_AUTH).json()["items"]
        assert [item["id"] for item in api] == [int(row.split('"')[1])]
    refused = client.get("/", params={"origin": "pagerduty"}, headers=API_AUTH).text
    assert "origin must be alertmanager, early_warning or backtest" in refused and "data-incident" not in refused

    # The header: why the scan warned, what moved, the forecast, and the SLA alert that joined.
    page = client.get(f"/incidents/{warning_id}", headers=API_AUTH).text
    header = page.split('id="early-warning"')[1].split('<p class="links">')[0]
    assert "queue_median beyond threshold for 3 scans" in header
    assert "<b>SLA alert LLMTTFTSLOBreach</b> fired 9 min after the early warning" in header
    assert "Early warning, before the TTFT SLO breaks: Median waiting requests 6.2" in header  # the scan's summary
    moved = re.findall(r'data-signal="([^"]+)"', header)
    assert moved == ["queue_median", "kv_cache_usage"], "only the signals that moved, in the scan's order"
    assert "already beyond" in header and "crosses in ~7 min" in header and "P(TTFT SLO breach" in header
    assert f"Judged against the TTFT SLO 1 s from {RULE}." in header
    assert f"TTFT SLO 1 s from {RULE}</p>" in header  # the scan's summary names it too
    assert 'id="early-warning"' not in client.get(f"/incidents/{alert_incident}", headers=API_AUTH).text

    # The timeline: the warning, the scan's transition, the SLA alert firing and joining.
    timeline = page.split('id="timeline"')[1].split("</section>")[0]
    for event in ("early warning raised", "signals started moving", "scan: watch → warning", "SLA alert joined"):
        assert f"<b>{event}</b>" in timeline, event
    assert "LLMTTFTSLOBreach, 9 min after the early warning" in timeline
    times = re.findall(r'<time datetime="([^"]+)">', timeline)
    assert times == sorted(times, key=datetime.fromisoformat), "the timeline is in order"


def test_the_timeline_holds_every_event_of_an_incident(pg_db: str, tmp_path: Path) -> None:
    with FakeSlack() as slack:
        settings = slack_settings(pg_db, tmp_path, slack)
        with TestClient(create_site(settings, dispatcher=RecordingDispatcher())) as client:
            incident_id = open_incident(client, pg_db)
            slack.fail_next(Failure(503))
            assert deliver(settings, incident_id, "investigation", attempt=1).retry_in is not None
            assert deliver(settings, incident_id, "investigation", attempt=2).status == "delivered"
            sign_in(client)
            token = csrf_of(client.get(f"/incidents/{incident_id}").text)
            form = {"category": "arrival_surge", "csrf_token": token}
            assert client.post(f"/incidents/{incident_id}/feedback", data=form).status_code == 200
            resolved = make_payload(group_key="pages", alerts=[make_alert("fp-pages", status="resolved")])
            assert post_webhook(client, resolved).status_code == 200
            page = client.get(f"/incidents/{incident_id}").text
    timeline = page.split('id="timeline"')[1].split("</section>")[0]
    events = re.findall(r"<b>([^<]+)</b>(?: · ([^<]*))?</li>", timeline)
    what = [e for e, _ in events]
    for expected in (
        "incident opened",
        "alert fired",
        "alert received",
        "investigation 1 queued",
        "investigation 1 started",
        "investigation 1 done",
        "feedback",
        "alert resolved",
        "incident resolved",
    ):
        assert expected in what, (expected, what)
    slack_attempts = [detail for e, detail in events if e == "Slack post (investigation)"]
    assert len(slack_attempts) == 2 and "HTTP 503" in slack_attempts[0], slack_attempts
    assert ("feedback", "arrival_surge confirmed by env-token-1") in events
