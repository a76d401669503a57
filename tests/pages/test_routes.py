"""The pages without a browser: closed without a token, the sign-in cookie's flags, CSRF on every
form, scopes, open redirects refused, untrusted text escaped and untrusted URLs never linked."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from rca.domain.factor import CommonFactor, Verdict
from rca.pages.site import create_site
from rca.store import tokens
from rca.store.db import session_scope
from rca.store.models import InvestigationRow
from tests.helpers.history import finish_blind, finish_investigation
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import API_AUTH, API_TOKEN, RecordingDispatcher, make_settings
from tests.pages.site import SCRIPT, csrf_of, open_incident, sign_in, site


def test_pages_are_closed_without_a_token_and_a_wrong_bearer_is_refused(client: TestClient) -> None:
    for path in ("/", "/incidents/1", "/stats"):
        reply = client.get(path, follow_redirects=False)
        assert reply.status_code == 303 and reply.headers["location"].startswith("/signin"), path
    assert client.get("/stats", headers={"Authorization": "Bearer nope"}).status_code == 401
    page = client.get("/stats", headers=API_AUTH)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'; script-src 'self'" in page.headers["content-security-policy"]


def test_sign_in_sets_an_httponly_strict_cookie_and_never_shows_the_token(client: TestClient) -> None:
    refused = sign_in(client, "not-a-token")
    assert refused.status_code == 401 and "not an API token" in refused.text and "rca_session" not in client.cookies
    reply = sign_in(client)
    assert reply.status_code == 303 and reply.headers["location"] == "/stats"
    cookie = next(h for h in reply.headers.get_list("set-cookie") if h.startswith("rca_session="))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Secure" not in cookie
    page = client.get("/stats")
    assert page.status_code == 200 and API_TOKEN not in page.text


def test_the_cookie_is_secure_behind_https(pg_db: str, tmp_path: Path) -> None:
    app = create_site(make_settings(pg_db, tmp_path), dispatcher=RecordingDispatcher())
    with TestClient(app, base_url="https://rca.example") as client:
        cookie = next(h for h in sign_in(client).headers.get_list("set-cookie") if h.startswith("rca_session="))
    assert "Secure" in cookie


def test_sign_in_and_feedback_need_the_pages_csrf_token(client: TestClient, pg_db: str) -> None:
    incident_id = open_incident(client, pg_db)
    assert client.post("/signin", data={"token": API_TOKEN}).status_code == 403
    sign_in(client)
    page = client.get(f"/incidents/{incident_id}")
    form = {"category": "arrival_surge", "note": "n"}
    for forged in ({}, {"csrf_token": "0" * 64}):
        reply = client.post(f"/incidents/{incident_id}/feedback", data=form | forged, follow_redirects=False)
        assert reply.status_code == 403, forged
    assert "Confirmed cause" not in client.get(f"/incidents/{incident_id}").text
    token = csrf_of(page.text)
    reply = client.post(f"/incidents/{incident_id}/feedback", data=form | {"csrf_token": token}, follow_redirects=False)
    assert reply.status_code == 303 and reply.headers["location"] == f"/incidents/{incident_id}#feedback"
    assert "Confirmed cause: <b>arrival_surge</b>" in client.get(f"/incidents/{incident_id}").text
    verdicts = client.get(f"/api/v1/incidents/{incident_id}/feedback", headers=API_AUTH).json()[-1]["hypotheses"]
    assert verdicts == [{"rank": 1, "correct": False}, {"rank": 2, "correct": True}]


def test_a_read_token_reads_but_gives_no_feedback(client: TestClient, pg_db: str) -> None:
    incident_id = open_incident(client, pg_db)
    with session_scope(pg_db) as session:
        reader = tokens.create(session, "reader", "read")
    sign_in(client, reader)
    page = client.get(f"/incidents/{incident_id}")
    assert page.status_code == 200 and "feedback-form" not in page.text
    form = {"category": "arrival_surge", "csrf_token": csrf_of(page.text)}
    assert client.post(f"/incidents/{incident_id}/feedback", data=form).status_code == 403


def test_investigate_again_queues_a_new_investigation_and_the_page_names_it(client: TestClient, pg_db: str) -> None:
    """Issue 32.2: the page's button (a form with the CSRF token, as feedback's) queues a new
    investigation through the API's handler; the page then says it is queued, and whose causes it shows."""
    incident_id = open_incident(client, pg_db)
    sign_in(client)
    page = client.get(f"/incidents/{incident_id}")
    assert 'id="again-form"' in page.text and "Investigate again" in page.text
    for forged in ({"csrf_token": ""}, {"csrf_token": "0" * 64}):
        refused = client.post(f"/incidents/{incident_id}/investigations", data=forged, follow_redirects=False)
        assert refused.status_code == 403, forged
    dispatcher = client.app.state.dispatcher  # type: ignore[attr-defined]
    assert dispatcher.enqueued == [1], "only intake's, so far"
    form = {"csrf_token": csrf_of(page.text)}
    reply = client.post(f"/incidents/{incident_id}/investigations", data=form, follow_redirects=False)
    assert reply.status_code == 303 and reply.headers["location"] == f"/incidents/{incident_id}#again"
    latest = client.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH).json()["investigation"]
    assert (latest["id"], latest["status"], latest["reason"], latest["requested_by"]) == (
        2,
        "queued",
        "requested",
        "env-token-1",
    )
    assert dispatcher.enqueued == [1, 2]
    shown = client.get(f"/incidents/{incident_id}").text
    pending = re.search(r'<p id="again-pending">(.*?)</p>', shown, re.S)
    assert pending, "the page does not say the new investigation is queued"
    assert "Investigation 2 queued" in pending.group(1) and "asked for by env-token-1" in pending.group(1)
    assert "what this page shows is investigation 1's until it finishes" in pending.group(1)
    assert 'id="again-form"' not in shown, "no second button while one waits"
    assert 'data-category="kv_memory_pressure"' in shown, "the diagnosis stays meanwhile"
    assert "investigation 2 queued</b> · requested by env-token-1" in shown, "the timeline says who asked"
    # Posted again (a second tab): the waiting one answers, nothing piles up.
    again = client.post(f"/incidents/{incident_id}/investigations", data=form, follow_redirects=False)
    assert again.status_code == 303 and dispatcher.enqueued == [1, 2]
    assert len(client.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH).json()["investigations"]) == 2
    missing = client.post("/incidents/999999/investigations", data=form, follow_redirects=False)
    assert missing.status_code == 404 and "Incident 999999 not found." in missing.text


def test_a_read_token_has_no_investigate_again_button(client: TestClient, pg_db: str) -> None:
    incident_id = open_incident(client, pg_db)
    with session_scope(pg_db) as session:
        reader = tokens.create(session, "reader", "read")
    sign_in(client, reader)
    page = client.get(f"/incidents/{incident_id}")
    assert page.status_code == 200 and 'id="again-form"' not in page.text
    form = {"csrf_token": csrf_of(page.text)}
    assert client.post(f"/incidents/{incident_id}/investigations", data=form).status_code == 403
    assert len(client.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH).json()["investigations"]) == 1


def test_untrusted_text_is_escaped_and_untrusted_urls_are_not_links(client: TestClient, pg_db: str) -> None:
    incident_id = open_incident(client, pg_db, generator_url="javascript:alert(1)")
    html = client.get(f"/incidents/{incident_id}", headers=API_AUTH).text
    assert SCRIPT not in html and "&lt;script&gt;window.__injected = 1&lt;/script&gt;" in html
    assert "javascript:" not in html, "an alert's generator URL of another scheme became a link"


def test_sign_in_returns_only_to_a_path_of_this_site(client: TestClient) -> None:
    for target in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
        form = client.get("/signin")
        data = {"token": API_TOKEN, "csrf_token": csrf_of(form.text), "next": target}
        assert client.post("/signin", data=data, follow_redirects=False).headers["location"] == "/", target


def test_pages_are_open_when_the_api_is(pg_db: str, tmp_path: Path) -> None:
    with site(pg_db, tmp_path, api_allow_unauthenticated=True) as client:
        assert client.get("/", follow_redirects=False).status_code == 200
        assert client.get("/stats").status_code == 200


def test_the_list_filters_as_the_api_does(client: TestClient, pg_db: str) -> None:
    incident_id = open_incident(client, pg_db)
    row = f'data-incident="{incident_id}"'
    for params in ({"signal": "kv_cache_usage"}, {"category": "kv_memory_pressure"}, {"confirmed": "no"}):
        assert row in client.get("/", params=params, headers=API_AUTH).text, params
    for params in ({"signal": "gpu_xid_errors"}, {"category": "arrival_surge"}, {"status": "resolved"}):
        assert row not in client.get("/", params=params, headers=API_AUTH).text, params


def test_the_evidence_stays_while_a_newer_investigation_is_queued(client: TestClient, pg_db: str) -> None:
    incident_id = open_incident(client, pg_db)
    second = make_payload(group_key="pages", alerts=[make_alert("fp-pages"), make_alert("fp-pages-2")])
    assert post_webhook(client, second).status_code == 200
    latest = client.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH).json()["investigation"]
    assert latest["status"] == "queued" and latest["hypotheses"] == []
    page = client.get(f"/incidents/{incident_id}", headers=API_AUTH).text
    assert 'data-category="kv_memory_pressure"' in page and "investigation 1 done" in page


def _row(html: str, incident_id: int) -> str:
    """The list's row of one incident."""
    found = re.search(rf'<tr data-incident="{incident_id}">(.*?)</tr>', html, re.S)
    assert found, html
    return found.group(1)


def test_a_blind_investigation_says_why_it_could_not_investigate_and_shows_no_cause(
    client: TestClient, pg_db: str
) -> None:
    """Issue 32.1: the page showed an empty "Breached findings" section, rows of "data unavailable"
    and, in the list, no_clear_cause 20 % with a green bar."""
    reply = post_webhook(client, make_payload(group_key="blind", alerts=[make_alert("fp-blind")]))
    incident_id = reply.json()["incident_id"]
    finish_blind(pg_db, incident_id)
    page = client.get(f"/incidents/{incident_id}", headers=API_AUTH).text
    assert 'id="inconclusive"' in page and "Could not investigate: no Prometheus configured" in page
    assert "Set RCA_PROMETHEUS_URL" in page  # what to do about it
    assert 'id="causes"' not in page and 'id="evidence"' not in page and 'id="healthy"' not in page
    assert "<meter" not in page and "data-category" not in page  # no ranked cause, no confidence
    assert "1 signal not measured" in page  # what it tried to read, folded away
    assert "investigation 1 inconclusive</b> · could not investigate: no Prometheus configured" in page  # the timeline
    row = _row(client.get("/", headers=API_AUTH).text, incident_id)
    assert "could not investigate: no Prometheus configured" in row and "investigation inconclusive" in row
    assert "<meter" not in row
    feedback = {"category": "kv_memory_pressure"}
    assert client.post(f"/api/v1/incidents/{incident_id}/feedback", json=feedback, headers=API_AUTH).is_success
    stats = client.get("/stats", headers=API_AUTH).text  # confirmed, but nothing was ranked to judge
    assert '<span id="undiagnosed">1</span> confirmed incident that no investigation diagnosed' in stats
    assert "<tr><td>all</td><td>0</td>" in stats


def test_a_newer_blind_run_keeps_the_diagnosis_on_the_page_and_says_so(client: TestClient, pg_db: str) -> None:
    incident_id = open_incident(client, pg_db)
    second = make_payload(group_key="pages", alerts=[make_alert("fp-pages"), make_alert("fp-pages-2")])
    assert post_webhook(client, second).status_code == 200
    blind = finish_blind(pg_db, incident_id, "Prometheus at http://p:9090 is unavailable: timed out")
    page = client.get(f"/incidents/{incident_id}", headers=API_AUTH).text
    assert 'data-category="kv_memory_pressure"' in page and "investigation 1 done" in page
    assert f"Investigation {blind}, newer, could not investigate: Prometheus unreachable" in page
    row = _row(client.get("/", headers=API_AUTH).text, incident_id)
    assert "kv_memory_pressure" in row and "investigation inconclusive" in row  # the diagnosis stays


def test_a_diagnosis_without_breaches_says_so_instead_of_an_empty_section(client: TestClient, pg_db: str) -> None:
    reply = post_webhook(client, make_payload(group_key="calm", alerts=[make_alert("fp-calm")]))
    incident_id = reply.json()["incident_id"]
    finish_investigation(pg_db, incident_id, [], ["no_clear_cause"])
    page = client.get(f"/incidents/{incident_id}", headers=API_AUTH).text
    assert "No signal breached its threshold." in page and "Shaded: the baseline period" not in page


def test_the_list_pages_by_the_apis_cursor(client: TestClient) -> None:
    for group in ("older", "newer"):
        assert (
            post_webhook(client, make_payload(group_key=group, alerts=[make_alert(f"fp-{group}")])).status_code == 200
        )
    first = client.get("/", params={"limit": 1}, headers=API_AUTH).text
    found = re.search(r'href="/\?([^"]+)" rel="next"', first)
    assert found and "cursor=" in found.group(1) and 'data-incident="2"' in first and 'data-incident="1"' not in first
    second = client.get("/?" + found.group(1).replace("&amp;", "&"), headers=API_AUTH).text
    assert 'data-incident="1"' in second and 'data-incident="2"' not in second and 'rel="next"' not in second


def test_an_unknown_incident_is_a_404_page_and_a_bad_search_says_why(client: TestClient) -> None:
    missing = client.get("/incidents/999", headers=API_AUTH)
    assert missing.status_code == 404 and "Incident 999 not found" in missing.text
    listed = client.get("/", params={"q": "!!!", "status": ""}, headers=API_AUTH)
    assert listed.status_code == 200 and "no searchable words" in listed.text


def test_a_fleet_incident_shows_its_hosts_and_each_hosts_top_cause(client: TestClient, pg_db: str) -> None:
    alerts = [make_alert(f"fp-{host}", instance=f"{host}:8000") for host in ("gpu-node-1", "gpu-node-2")]
    incident_id = post_webhook(client, make_payload(group_key="fleet", alerts=alerts)).json()["incident_id"]
    first, second = sorted(
        inv["id"] for inv in client.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH).json()["investigations"]
    )
    finish_investigation(pg_db, incident_id, ["request_rate"], ["arrival_surge"], investigation_id=first)
    finish_investigation(pg_db, incident_id, ["kv_cache_usage"], ["kv_memory_pressure"], investigation_id=second)
    page = client.get(f"/incidents/{incident_id}", headers=API_AUTH).text
    section = page.split('<section id="fleet">')[1].split("</section>")[0]
    cells = [re.sub(r"\s+", " ", c).strip() for c in re.findall(r"<td>(.*?)</td>", section)]
    assert cells == [
        "gpu-node-1", "arrival_surge", "0.80", f"{first} done",
        "gpu-node-2", "kv_memory_pressure", "0.80", f"{second} done",
    ]  # fmt: skip
    assert "Fleet-wide" not in section and "common-factor" not in section  # not judged: nothing said
    with session_scope(pg_db) as session:  # as the round's first investigation stores it
        row = session.get(InvestigationRow, first)
        assert row is not None
        row.common_factor = CommonFactor(Verdict.NONE, 2, 4).to_dict()
    page = client.get(f"/incidents/{incident_id}", headers=API_AUTH).text
    section = page.split('<section id="fleet">')[1].split("</section>")[0]
    assert '<p id="common-factor">No common factor among the 2 affected hosts and their 4 healthy peers</p>' in section
    single = open_incident(client, pg_db)
    assert 'id="fleet"' not in client.get(f"/incidents/{single}", headers=API_AUTH).text
