"""Shared by the Slack tests: settings pointing at the fake Slack, incidents stored directly, and the
Slack notices they owe (rca/store/notices.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from rca.config import Settings
from rca.store import digests, notices
from rca.store.db import session_scope
from rca.store.models import AlertRow, FindingRow, HypothesisRow, IncidentRow, InvestigationRow
from tests.fakes.slack import TOKEN, FakeSlack
from tests.helpers import factories
from tests.helpers.service import make_settings

CHANNEL = "#llm-alerts"


def slack_settings(db_url: str, tmp_path: Path, slack: FakeSlack, mode: str = "bot", **overrides: Any) -> Settings:
    values: dict[str, Any] = {"slack_retry_backoff_seconds": 0.2, "public_url": "https://rca.example"}
    if mode == "bot":
        values |= {"slack_bot_token": TOKEN, "slack_channel": CHANNEL, "slack_api_url": slack.api_url}
    else:
        values |= {"slack_webhook_url": slack.webhook_url}
    return make_settings(db_url, tmp_path, **(values | overrides))


def store_incident(url: str, *, annotations: dict[str, str] | None = None, severity: str = "critical") -> int:
    labels = {"alertname": factories.ALERTNAME, "instance": factories.INSTANCE, "severity": severity}
    with session_scope(url) as session:
        incident = IncidentRow(**factories.incident(f"g-{datetime.now(UTC).timestamp()}", common_labels=labels))
        session.add(incident)
        session.flush()
        alert = factories.alert("fp", labels=labels, annotations=annotations or {"summary": "queue above 4.7"})
        session.add(AlertRow(incident_id=incident.id, **alert))
        return incident.id


def queued_investigation(url: str) -> int:
    """A stored incident with one investigation waiting to run."""
    incident_id = store_incident(url)
    with session_scope(url) as session:
        inv = InvestigationRow(incident_id=incident_id, status="queued", reason="new_incident", attempts=0)
        session.add(inv)
        session.flush()
        return inv.id


def store_investigation(
    url: str,
    incident_id: int,
    breached: list[str],
    categories: list[str],
    wording: str = "because the evidence says so",
    host: str | None = None,
) -> int:
    """A finished investigation with these breached findings and this ranking (of one host of a
    fleet incident, with `host`: `in_round` puts them in one round)."""
    now = datetime.now(UTC)
    with session_scope(url) as session:
        inv = InvestigationRow(
            incident_id=incident_id,
            status="done",
            reason="new_incident",
            attempts=1,
            queued_at=now,
            finished_at=now,
            total_seconds=2.5,
            analyst="rules",
            target={"host": host or "gpu-node-1", "instance": f"{host or 'gpu-node-1'}:8000"},
            host=host,
        )
        for key in ("queue_median", "cpu_bound_ratio", "prefix_cache_hit_rate"):
            hit = key in breached
            inv.findings.append(
                FindingRow(
                    key=key,
                    kind="signal",
                    title=key.replace("_", " "),
                    status="breached" if hit else "ok",
                    breached=hit,
                    value=9.0 if hit else 1.0,
                    baseline=1.0,
                    threshold=4.7,
                    comparison=">",
                    unit="requests",
                    detail="",
                )
            )
        for rank, category in enumerate(categories, start=1):
            inv.hypotheses.append(
                HypothesisRow(
                    rank=rank,
                    category=category,
                    title=f"{category}: {wording}",
                    confidence=round(0.8 - rank / 10, 2),
                    evidence=[],
                    contradicting=[],
                    next_steps=[],
                    explanation=wording,
                    analyst="rules",
                )
            )
        session.add(inv)
        session.flush()
        digests.refresh(session, incident_id)  # as every production write path does
        return inv.id


def in_round(url: str, investigation_ids: list[int]) -> None:
    """These investigations (one per host) queued together: the first's id is their round's."""
    with session_scope(url) as session:
        for investigation_id in investigation_ids:
            session.get_one(InvestigationRow, investigation_id).round_id = investigation_ids[0]


def resolve(url: str, incident_id: int) -> None:
    with session_scope(url) as session:
        incident = session.get(IncidentRow, incident_id)
        incident.status, incident.resolved_at = "resolved", datetime.now(UTC)


def slack_owed(url: str, incident_id: int) -> tuple[int, datetime | None]:
    """The incident's count of notices owed, and since when Slack is behind it (None: up to date)."""
    with session_scope(url) as session:
        row = session.execute(
            select(IncidentRow.slack_owed, IncidentRow.slack_owed_since).where(IncidentRow.id == incident_id)
        ).one()
    return row.slack_owed, row.slack_owed_since


def owe_slack(url: str, incident_id: int, ago: timedelta = timedelta(0)) -> None:
    """Owe a notice, as an investigation's commit or intake does; `ago` backdates the marker."""
    with session_scope(url) as session:
        notices.owe(session, incident_id)
    if ago:
        backdate_owed(url, incident_id, ago)


def backdate_owed(url: str, incident_id: int, ago: timedelta) -> None:
    """As if the notice had been owed `ago` already: past the sweep's grace period."""
    with session_scope(url) as session:
        notices.defer(session, incident_id, datetime.now(UTC) - ago)


def of_incident(received: list, incident_id: int) -> list:
    """The requests of the fake Slack that are about this incident (its message, replies, updates)."""
    return [
        r
        for r in received
        if f"Incident #{incident_id}*" in json.dumps(r.payload) or f"incident #{incident_id})" in json.dumps(r.payload)
    ]
