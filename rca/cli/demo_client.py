"""The demo's HTTP client of the service it started: post the alert to the webhook, then poll the
API until the investigation has finished."""

from __future__ import annotations

import time
from typing import Any

import httpx

from rca.cli.common import EXIT_FAILED, fail
from rca.domain.answer import answer_line
from rca.domain.status import InvestigationStatus

FINISHED = (InvestigationStatus.DONE, InvestigationStatus.INCONCLUSIVE, InvestigationStatus.FAILED)


class DemoClient:
    """The service at `base`, called with the demo's own webhook and API tokens."""

    def __init__(self, base: str, webhook_token: str, api_token: str) -> None:
        self.base = base
        self._webhook_auth = {"Authorization": f"Bearer {webhook_token}"}
        self._api_auth = {"Authorization": f"Bearer {api_token}"}

    def post_alert(self, payload: dict[str, Any]) -> httpx.Response:
        """The webhook's answer to `payload`; one line and exit 2 when it refuses it."""
        reply = httpx.post(f"{self.base}/api/v1/alertmanager", json=payload, headers=self._webhook_auth, timeout=10)
        if reply.status_code >= 400:
            fail(f"the webhook refused the payload: HTTP {reply.status_code}: {answer_line(reply.text)}")
        return reply

    def wait_for_investigation(
        self, incident_id: int, timeout: float, investigation_id: int | None = None
    ) -> dict[str, Any]:
        """The incident once its latest investigation (`investigation_id`, when given) has finished."""
        deadline = time.monotonic() + timeout
        while True:
            incident: dict[str, Any] = httpx.get(
                f"{self.base}/api/v1/incidents/{incident_id}", headers=self._api_auth, timeout=10
            ).json()
            inv = incident["investigation"]
            if investigation_id is not None and inv and inv["id"] < investigation_id:
                inv = None  # the one before it
            if inv and inv["status"] in FINISHED:
                return incident
            if time.monotonic() > deadline:
                fail(f"the investigation did not finish within {timeout:.0f} s", code=EXIT_FAILED)
            time.sleep(0.1)
