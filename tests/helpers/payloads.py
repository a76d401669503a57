"""Alertmanager webhook payloads (version 4) as Alertmanager builds them, and posting one."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

from tests.helpers.service import WEBHOOK_AUTH


def sample_payload() -> dict[str, Any]:
    return json.loads(resources.files("rca.samples").joinpath("alertmanager_queue_high.json").read_text())


def make_alert(
    fingerprint: str,
    *,
    status: str = "firing",
    alertname: str = "LLMRequestQueueMedianHigh",
    instance: str = "gpu-node-1:8000",
    starts_at: datetime | None = None,
    **labels: str,
) -> dict[str, Any]:
    starts = starts_at or datetime.now(UTC) - timedelta(minutes=5)
    ends = "0001-01-01T00:00:00Z" if status == "firing" else datetime.now(UTC).isoformat()
    return {
        "status": status,
        "labels": {"alertname": alertname, "instance": instance, "job": "vllm", **labels},
        "annotations": {"summary": f"{alertname} on {instance}"},
        "startsAt": starts.isoformat(),
        "endsAt": ends,
        "generatorURL": "http://prometheus.example:9090/graph",
        "fingerprint": fingerprint,
    }


def make_payload(
    group_key: str = '{}:{alertname="LLMRequestQueueMedianHigh"}',
    *,
    alerts: list[dict[str, Any]] | None = None,
    status: str | None = None,
) -> dict[str, Any]:
    """A version 4 notification; its status is `firing` if any alert fires, as Alertmanager does."""
    alerts = copy.deepcopy(alerts) if alerts is not None else [make_alert("fp-0001")]
    if status is None:
        status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    common = dict(alerts[0]["labels"])
    for alert in alerts[1:]:
        common = {k: v for k, v in common.items() if alert["labels"].get(k) == v}
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "llm-rca",
        "groupLabels": {"alertname": alerts[0]["labels"]["alertname"]},
        "commonLabels": common,
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.example:9093",
        "alerts": alerts,
    }


def post_webhook(client: Any, payload: Any, headers: dict[str, str] | None = None) -> Any:
    return client.post("/api/v1/alertmanager", json=payload, headers=WEBHOOK_AUTH if headers is None else headers)
