"""Builders of the nouns tests keep writing out: a finding, a hypothesis (rca.domain.evidence), and
the columns of an incident and of one of its alerts (as `rca.incidents.opened.open_incidents` takes
them, or `Incident(**incident())` for a row). Each has defaults that make a plausible, valid value;
a test names, as keyword overrides, the fields it is about, so that they stay visible where it
builds them.

    finding("queue_median", status="unavailable")        # breached follows the status
    finding("ttft_p95", baseline=None)                    # a chronic breach
    hypothesis(2, "kv_cache_pressure", evidence=["kv_cache_usage"])
    open_incidents(session, [incident(group_key="g1")], [[alert("fp-1")]])
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from rca.domain.evidence import Finding, Hypothesis
from rca.domain.status import AlertStatus, FindingStatus

ALERTNAME = "LLMRequestQueueMedianHigh"
INSTANCE = "gpu-node-1:8000"


def finding(key: str = "queue_median", *, status: str = FindingStatus.BREACHED, **overrides: Any) -> Finding:
    """A signal's finding: breached (unless `status` says otherwise; `breached` follows it), 1.0
    against a healthy baseline of 0.5, no threshold, unit or onset, no query or source."""
    values: dict[str, Any] = {
        "key": key,
        "kind": "signal",
        "title": key.replace("_", " "),
        "status": FindingStatus(status),
        "breached": status == FindingStatus.BREACHED,
        "value": 1.0,
        "baseline": 0.5,
        "threshold": None,
        "comparison": ">",
        "unit": "",
        "onset": None,
        "query": None,
        "source": None,
        "series_labels": None,
        "detail": f"{key} is {status}",
    }
    return Finding(**(values | overrides))


def hypothesis(rank: int = 1, category: str = "arrival_surge", **overrides: Any) -> Hypothesis:
    """The rules' hypothesis of this rank and category, citing no finding unless told."""
    values: dict[str, Any] = {
        "rank": rank,
        "category": category,
        "title": category.replace("_", " "),
        "confidence": round(0.8 - rank / 10, 2),
        "evidence": [],
        "explanation": "",
        "analyst": "rules",
    }
    return Hypothesis(**(values | overrides))


def incident(group_key: str = "g-1", *, status: str = AlertStatus.FIRING, **overrides: Any) -> dict[str, Any]:
    """The columns of an Alertmanager group's incident about the queue on gpu-node-1, opened now
    (resolved now too, when `status` is resolved)."""
    now = datetime.now(UTC)
    labels = {"alertname": ALERTNAME, "instance": INSTANCE}
    values: dict[str, Any] = {
        "group_key": group_key,
        "status": status,
        "title": "queue high",
        "alertname": ALERTNAME,
        "receiver": "llm-rca",
        "group_labels": {"alertname": ALERTNAME},
        "common_labels": labels,
        "common_annotations": {},
        "external_url": "http://alertmanager.example:9093",
        "origin": "alertmanager",
        "notification_count": 1,
        "created_at": now,
        "updated_at": now,
        "resolved_at": now if status == AlertStatus.RESOLVED else None,
    }
    return values | overrides


def alert(fingerprint: str = "fp-0001", *, status: str = AlertStatus.FIRING, **overrides: Any) -> dict[str, Any]:
    """The columns of one alert of an incident (without its `incident_id`, which the incident's
    opening adds), firing for five minutes on gpu-node-1 unless `status` says it resolved."""
    now = datetime.now(UTC)
    labels = {"alertname": ALERTNAME, "instance": INSTANCE, "job": "vllm"}
    values: dict[str, Any] = {
        "fingerprint": fingerprint,
        "alertname": ALERTNAME,
        "status": status,
        "labels": labels,
        "annotations": {"summary": f"{ALERTNAME} on {INSTANCE}"},
        "starts_at": now - timedelta(minutes=5),
        "ends_at": now if status == AlertStatus.RESOLVED else None,
        "generator_url": "http://prometheus.example:9090/graph",
        "raw": {},
        "first_seen_at": now,
        "last_seen_at": now,
    }
    return values | overrides
