"""The seed corpus: valid requests of every kind the service takes, which the mutators start from.

Every seed is accepted as it is (tests/api/test_fuzz.py checks that), so a refusal of a mutant is
due to its mutation. Times are fixed, so that a seed gives the same bytes on every run.
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

from tests.helpers.payloads import make_payload

WEBHOOK_PATH = "/api/v1/alertmanager"
SEARCH_PATH = "/api/v1/incidents"
STARTS = "2026-01-15T10:00:00Z"
GO_ZERO = "0001-01-01T00:00:00Z"
RUNBOOK = "https://runbooks.example/llm-queue"


def _alert(fingerprint: str, status: str = "firing", **labels: str) -> dict[str, Any]:
    name = labels.pop("alertname", "LLMRequestQueueMedianHigh")
    instance = labels.pop("instance", "gpu-node-1:8000")
    return {
        "status": status,
        "labels": {"alertname": name, "instance": instance, "job": "vllm", **labels},
        "annotations": {"summary": f"{name} on {instance}", "description": "queue above 20 for 5 minutes"},
        "startsAt": STARTS,
        "endsAt": GO_ZERO if status == "firing" else "2026-01-15T11:00:00Z",
        "generatorURL": "http://prometheus.example:9090/graph?g0.expr=vllm%3Anum_requests_waiting",
        "fingerprint": fingerprint,
    }


def _notification(group_key: str, alerts: list[dict[str, Any]], status: str = "firing") -> dict[str, Any]:
    """The helpers' notification, with a runbook annotation in common for the mutators to work on."""
    return {**make_payload(group_key, alerts=alerts, status=status), "commonAnnotations": {"runbook": RUNBOOK}}


def webhook_seeds() -> list[dict[str, Any]]:
    """Alertmanager version 4 notifications as Alertmanager sends them."""
    sample = json.loads(resources.files("rca.samples").joinpath("alertmanager_queue_high.json").read_text())
    sample["alerts"][0]["startsAt"] = STARTS
    return [
        sample,
        _notification('{}:{alertname="LLMRequestQueueMedianHigh"}', [_alert("fp-0001")]),
        _notification(
            '{}:{alertname="KVCacheUsageHigh"}',
            [_alert(f"fp-kv-{n}", alertname="KVCacheUsageHigh", instance=f"gpu-node-{n}:8000") for n in range(3)],
        ),
        _notification(
            '{}:{alertname="TTFTp95High"}', [_alert("fp-ttft", "resolved", alertname="TTFTp95High")], "resolved"
        ),
        _notification(
            '{}:{alertname="ITLp95High", cluster="東京"}',
            [_alert("fp-itl", alertname="ITLp95High", cluster="東京", model="llama 🦙", note="مرحبا")],
        ),
        {  # only what the schema requires
            "version": "4",
            "groupKey": "minimal",
            "status": "firing",
            "receiver": "r",
            "alerts": [{"status": "firing", "labels": {}, "startsAt": STARTS, "fingerprint": "f"}],
        },
    ]


def search_seeds() -> list[list[tuple[str, str]]]:
    """Query strings of `GET /api/v1/incidents` that a client would send."""
    return [
        [],
        [("q", "queue waiting")],
        [("status", "firing"), ("limit", "5")],
        [("label", "instance=gpu-node-1:8000")],
        [("label", "job=vllm"), ("label", "instance=gpu-node-0:8000")],
        [("since", "2026-01-01T00:00:00Z"), ("until", "2030-01-01T00:00:00+02:00")],
        [("signal", "kv_cache_usage"), ("category", "kv_memory_pressure")],
        [("confirmed", "true"), ("confirmed_category", "kv_memory_pressure")],
        [("alertname", "KVCacheUsageHigh"), ("sort", "time"), ("total", "true")],
        [("q", "kv cache"), ("sort", "relevance"), ("limit", "200")],
    ]


def feedback_seeds(category: str) -> list[dict[str, Any]]:
    """Bodies of `POST /api/v1/incidents/{id}/feedback`; `category` is a taxonomy id."""
    return [
        {"category": category},
        {"category": category, "note": "the KV cache filled up after the deploy"},
        {"category": category, "note": "", "hypotheses": []},
    ]


def copy_of(seed: Any) -> Any:
    return copy.deepcopy(seed)
