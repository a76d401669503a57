"""The service as the tests build it: settings with known tokens, a dispatcher that only records,
the app under a real uvicorn, and waiting for an investigation through the API."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from rca.config import Settings, load_settings
from rca.domain.status import InvestigationStatus
from tests.e2e.promstack import free_port
from tests.helpers.waiting import wait_for

WEBHOOK_TOKEN = "webhook-secret-for-tests"
API_TOKEN = "api-secret-for-tests"
WEBHOOK_AUTH = {"Authorization": f"Bearer {WEBHOOK_TOKEN}"}
API_AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def make_settings(database_url: str, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "data_dir": tmp_path / "rca-data",
        "webhook_token": WEBHOOK_TOKEN,
        "api_tokens": API_TOKEN,
        "prometheus_url": None,
        # No background fleet scan beside what a test drives itself (tests/scan turn it on).
        "scan_enabled": False,
    }
    values.update(overrides)
    return load_settings(**values)


class RecordingDispatcher:
    """Records what intake asked to enqueue, and runs nothing: for tests of intake alone."""

    def __init__(self) -> None:
        self.enqueued: list[int] = []
        self.notified: list[tuple[int, str]] = []

    def enqueue(self, investigation_id: int) -> bool:
        self.enqueued.append(investigation_id)
        return True

    def notify(self, incident_id: int, event: str) -> bool:
        self.notified.append((incident_id, event))
        return True

    def close(self) -> None:
        pass


class LiveServer:
    """The app under a real uvicorn on a free loopback port, in a thread of this process."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        wait_for(lambda: self.server.started or not self.thread.is_alive(), 10, "uvicorn to start", 0.02)
        assert self.server.started, "uvicorn did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def wait_for_investigation(client: TestClient, incident_id: int, timeout: float = 30) -> dict[str, Any]:
    """Poll the API until the incident's latest investigation is finished: done, inconclusive or
    failed; a fleet incident's, every host's of its round."""
    finished_statuses = (InvestigationStatus.DONE, InvestigationStatus.INCONCLUSIVE, InvestigationStatus.FAILED)

    def finished() -> dict[str, Any] | None:
        reply = client.get(f"/api/v1/incidents/{incident_id}", headers=API_AUTH)
        assert reply.status_code == 200, reply.text
        inv, fleet = reply.json()["investigation"], reply.json()["fleet"]
        ended = inv and inv["status"] in finished_statuses and not (fleet and fleet["unfinished"])
        return reply.json() if ended else None

    return wait_for(finished, timeout, f"the investigation of incident {incident_id}")
