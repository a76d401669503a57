"""What the app as a whole tells the world: the unauthenticated readiness probe names the dependency
that is down but not why (the error's text holds hosts, ports and users), and the access log never
holds a credential sent in a query string."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from rca.api.app import create_app
from tests.helpers.databases import CLOSED_PORT_DATABASE_URL
from tests.helpers.service import API_TOKEN, LiveServer, RecordingDispatcher, make_settings


def test_readyz_names_the_dependency_that_is_down_but_not_its_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(CLOSED_PORT_DATABASE_URL, tmp_path, broker_url="redis://127.0.0.1:1/0")
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client, caplog.at_level(logging.WARNING):
        reply = client.get("/readyz")
    assert reply.status_code == 503
    assert reply.json() == {
        "status": "not ready",
        "checks": {
            "database": "unavailable",
            "broker": "unavailable",
            "queue": "celery",
            "prometheus": "not configured",
        },
    }
    assert "127.0.0.1" not in reply.text and ":1" not in reply.text
    # The operator still learns why, from the log.
    assert any("database unavailable" in r.getMessage() and "127.0.0.1" in r.getMessage() for r in caplog.records)


def test_readyz_is_ready_when_the_database_answers(pg_db: str, tmp_path: Path) -> None:
    with TestClient(create_app(make_settings(pg_db, tmp_path), dispatcher=RecordingDispatcher())) as client:
        reply = client.get("/readyz")
    assert reply.status_code == 200, reply.text
    assert reply.json()["checks"]["database"] == "ok"


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_credential_in_the_query_string_never_reaches_the_access_log(pg_db: str, tmp_path: Path) -> None:
    server = LiveServer(create_app(make_settings(pg_db, tmp_path), dispatcher=RecordingDispatcher()))
    # After uvicorn configured its loggers (which drops their handlers): uvicorn's own access log.
    access = logging.getLogger("uvicorn.access")
    lines, level = Lines(), access.level
    access.addHandler(lines)
    access.setLevel(logging.INFO)
    try:
        with server:
            reply = httpx.get(
                f"{server.url}/api/v1/incidents",
                params={"q": "kv cache", "access_token": API_TOKEN, "api-key": API_TOKEN, "limit": "5"},
                timeout=10,
            )
            httpx.get(f"{server.url}/healthz?password=hunter2&signal=kv_cache_usage", timeout=10)
    finally:
        access.removeHandler(lines)
        access.setLevel(level)
    assert reply.status_code == 401  # a token in the URL is not a credential the API accepts
    text = "\n".join(lines.lines)
    assert "/api/v1/incidents?q=kv+cache&access_token=REDACTED&api-key=REDACTED&limit=5" in text, text
    assert "/healthz?password=REDACTED&signal=kv_cache_usage" in text, text
    assert API_TOKEN not in text and "hunter2" not in text
