"""Helpers for the history tests: finish an investigation through the real write path
(`claim` + `finish`), with chosen findings and ranked causes, or blind."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from rca.collect.prometheus import Collection, Window
from rca.collect.target import Target
from rca.config import ScopeConfig
from rca.domain.coverage import NO_PROMETHEUS
from rca.domain.evidence import Finding
from rca.domain.status import FindingStatus
from rca.incidents import investigations
from rca.pipeline import Analysis, target_of
from rca.store import digests
from rca.store.db import session_scope
from rca.store.models import InvestigationRow
from tests.helpers import factories

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def finding(key: str, onset_minute: int | None = None, breached: bool = True, title: str | None = None) -> Finding:
    return factories.finding(
        key,
        status=FindingStatus.BREACHED if breached else FindingStatus.OK,
        title=title or f"{key.replace('_', ' ')} rose",
        baseline=0.1,
        threshold=0.5,
        unit="ratio",
        onset=None if onset_minute is None else T0 + timedelta(minutes=onset_minute),
        query=f"{key}_query",
        source="prometheus",
        detail=f"{key} went from 0.1 to 1.0",
    )


def _claim_latest(url: str, incident_id: int, investigation_id: int | None = None) -> tuple[int, Target]:
    """The incident's newest investigation (or the one named), claimed, and the target it looks at."""
    with session_scope(url) as session:
        inv_id = investigation_id or session.scalar(
            select(InvestigationRow.id)
            .where(InvestigationRow.incident_id == incident_id)
            .order_by(InvestigationRow.id.desc())
            .limit(1)
        )
        claim = investigations.claim(session, inv_id)
        assert claim is not None
        return inv_id, target_of(claim, ScopeConfig())


def finish_blind(
    url: str, incident_id: int, prometheus_error: str | None = NO_PROMETHEUS, investigation_id: int | None = None
) -> int:
    """Run the incident's queued investigation (its newest, or the one named) to its end with
    nothing measured, as the pipeline does without a Prometheus (the default), with an unreachable
    one, or (None) one without series for the target; returns its id."""
    inv_id, target = _claim_latest(url, incident_id, investigation_id)
    missing = finding("queue_median", breached=False)
    missing.status, missing.value, missing.baseline = FindingStatus.UNAVAILABLE, None, None
    missing.detail = f"data unavailable: {prometheus_error or 'no serving series match this target'}"
    window = Window(start=T0 - timedelta(hours=3), end=T0 + timedelta(minutes=30), step_seconds=15)
    analysis = Analysis(
        target=target,
        collection=Collection(window=window, selectors={}, results=[], prometheus_error=prometheus_error),
        findings=[missing],
        hypotheses=[],
        collect_seconds=0.1,
    )
    with session_scope(url) as session:
        investigations.finish(session, inv_id, analysis.result(total_seconds=0.2), [], owe_slack=False)
    return inv_id


def finish_investigation(
    url: str,
    incident_id: int,
    breached: list[str],
    categories: list[str],
    stack: str | None = "vllm",
    analyst: str = "rules",
    investigation_id: int | None = None,
) -> int:
    """Run the incident's queued investigation (its newest, or the one named) to `done` with these
    results; returns its id. `breached` is in onset order (the first moved first)."""
    inv_id, target = _claim_latest(url, incident_id, investigation_id)
    findings = [finding(key, onset_minute=n) for n, key in enumerate(breached)] + [
        finding("gpu_utilization_ok", breached=False)
    ]
    hypotheses = [
        factories.hypothesis(
            n + 1,
            cat,
            title=f"{cat.replace('_', ' ')} suspected",
            confidence=round(0.8 - 0.2 * n, 2),
            evidence=breached[:1],
            analyst=analyst,
        )
        for n, cat in enumerate(categories)
    ]
    window = Window(start=T0 - timedelta(hours=3), end=T0 + timedelta(minutes=30), step_seconds=15)
    analysis = Analysis(
        target=target,
        collection=Collection(window=window, selectors={}, results=[], stack=stack),
        findings=findings,
        hypotheses=hypotheses,
        collect_seconds=0.1,
    )
    with session_scope(url) as session:
        investigations.finish(session, inv_id, analysis.result(total_seconds=0.2), [], owe_slack=False)
        if analyst != "rules":  # the LLM analyst's own write path lands on another branch
            session.get(InvestigationRow, inv_id).analyst = analyst
            digests.refresh(session, incident_id)
    return inv_id
