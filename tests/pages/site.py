"""What the page tests share: the site (API plus pages) on a test database, an incident with a
finished investigation and a <script> in its annotation, and signing in through the form."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from rca.pages.site import create_site
from tests.helpers.history import finish_investigation
from tests.helpers.payloads import make_alert, make_payload, post_webhook
from tests.helpers.service import API_TOKEN, RecordingDispatcher, make_settings

SCRIPT = "<script>window.__injected = 1</script>"
INJECTED = '<script>window.__injected = 1</script><img src=x onerror="window.__injected = 2">'


def site(url: str, tmp_path: Path, **settings: Any) -> TestClient:
    return TestClient(create_site(make_settings(url, tmp_path, **settings), dispatcher=RecordingDispatcher()))


def open_incident(client: TestClient, url: str, generator_url: str = "http://prometheus.example:9090/graph") -> int:
    alert = make_alert("fp-pages") | {"generatorURL": generator_url}
    payload = make_payload(group_key="pages", alerts=[alert])
    payload["commonAnnotations"] = {"description": SCRIPT}
    reply = post_webhook(client, payload)
    assert reply.status_code == 200, reply.text
    incident_id: int = reply.json()["incident_id"]
    finish_investigation(url, incident_id, ["kv_cache_usage", "queue_median"], ["kv_memory_pressure", "arrival_surge"])
    return incident_id


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


def sign_in(client: TestClient, token: str = API_TOKEN) -> Any:
    form = client.get("/signin")
    return client.post(
        "/signin", data={"token": token, "csrf_token": csrf_of(form.text), "next": "/stats"}, follow_redirects=False
    )
