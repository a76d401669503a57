"""The page tests' site client, on a database of the test's own, and the demo incident investigated by
`rca serve`'s app on a live port."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from rca.pages.site import create_site
from tests.helpers.demo_incident import demo_payload, replayed_window
from tests.helpers.service import API_AUTH, WEBHOOK_AUTH, LiveServer, make_settings
from tests.helpers.waiting import wait_for
from tests.pages.site import INJECTED, site


@pytest.fixture
def client(pg_db: str, tmp_path: Path) -> Iterator[TestClient]:
    with site(pg_db, tmp_path) as client:
        yield client


@pytest.fixture
def investigated(pg_db: str, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """`rca serve`'s app on a live port, and the demo incident it investigated (as the API shows
    it). The recorded Prometheus is gone by the time the pages are read: they draw what was kept."""
    with ExitStack() as prometheus:
        prometheus_url, alert_start = prometheus.enter_context(replayed_window())
        app = create_site(make_settings(pg_db, tmp_path, prometheus_url=prometheus_url))
        with LiveServer(app) as server:
            # An earlier incident with the same evidence, then the one the test reads.
            for group, description in (("browser-earlier", "the same fault, earlier"), ("browser", INJECTED)):
                payload = demo_payload(alert_start, group, description=description)
                reply = httpx.post(f"{server.url}/api/v1/alertmanager", json=payload, headers=WEBHOOK_AUTH)
                assert reply.status_code == 200, reply.text
                incident_url = f"{server.url}/api/v1/incidents/{reply.json()['incident_id']}"

                def finished() -> dict[str, Any] | None:
                    incident = httpx.get(incident_url, headers=API_AUTH).json()  # noqa: B023 - called at once
                    done = incident["investigation"] and incident["investigation"]["status"] == "done"
                    return incident if done else None

                incident = wait_for(finished, 60, f"the investigation of {group}")
            prometheus.close()
            yield server.url, incident
