"""Investigation state changes: claim, save the result, fail, find the ones left behind."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from rca.analyst.validate import INVALID_ANSWER
from rca.collect.target import Target, target_from_alerts
from rca.config import TargetConfig
from rca.store import digests
from rca.store.models import Alert, Finding, Hypothesis, Investigation, utcnow

if TYPE_CHECKING:
    from rca.analyst.explain import AnalystRecord
    from rca.pipeline import Analysis


@dataclass(frozen=True)
class Claim:
    """What a worker needs to run an investigation, read while the row was claimed."""

    investigation_id: int
    incident_id: int
    incident_created_at: datetime
    alert_labels: list[dict[str, str]]
    alert_starts: list[datetime]
    alert_annotations: list[dict[str, str]] = field(default_factory=list)

    def target(self, config: TargetConfig) -> Target:
        return target_from_alerts(self.alert_labels, self.alert_starts, config)


def claim(session: Session, investigation_id: int) -> Claim | None:
    """Mark the investigation running, or return None if it is finished or unknown."""
    inv = session.get(Investigation, investigation_id, with_for_update=True)
    if inv is None or inv.status == "done":
        return None
    alerts = session.scalars(select(Alert).where(Alert.incident_id == inv.incident_id)).all()
    firing = [a for a in alerts if a.status == "firing"] or list(alerts)
    inv.status = "running"
    inv.attempts += 1
    inv.started_at = utcnow()
    inv.error = None
    return Claim(investigation_id, inv.incident_id, inv.incident.created_at, [a.labels for a in firing],
                 [a.starts_at for a in firing], [a.annotations for a in firing])


def save_analysis(session: Session, investigation_id: int, analysis: Analysis, total_seconds: float) -> None:
    """Replace the investigation's findings and hypotheses with this analysis, and close it."""
    inv = session.get(Investigation, investigation_id, with_for_update=True)
    if inv is None:
        raise LookupError(f"investigation {investigation_id} vanished")
    session.execute(delete(Finding).where(Finding.investigation_id == investigation_id))
    session.execute(delete(Hypothesis).where(Hypothesis.investigation_id == investigation_id))
    for f in analysis.findings:
        session.add(Finding(
            investigation_id=investigation_id, key=f.key, kind=f.kind, title=f.title, status=f.status,
            breached=f.breached, value=f.value, baseline=f.baseline, threshold=f.threshold,
            comparison=f.comparison, unit=f.unit, onset=f.onset, query=f.query, source=f.source,
            series_labels=f.series_labels, detail=f.detail,
        ))
    for h in analysis.hypotheses:
        session.add(Hypothesis(
            investigation_id=investigation_id, rank=h.rank, category=h.category, title=h.title,
            confidence=h.confidence, evidence=h.evidence, contradicting=h.contradicting,
            next_steps=h.next_steps, explanation=h.explanation, analyst=h.analyst,
        ))
    window = analysis.collection.window
    inv.status = "done"
    inv.finished_at = utcnow()
    inv.collect_seconds = round(analysis.collect_seconds, 4)
    inv.total_seconds = round(total_seconds, 4)
    inv.analyst = "rules"
    if analysis.analyst is not None:
        _save_analyst_record(inv, analysis.analyst)
    inv.window_start, inv.window_end, inv.step_seconds = window.start, window.end, window.step_seconds
    inv.target = analysis.target.to_dict() | {"selectors": analysis.collection.selectors,
                                              "stack": analysis.collection.stack}
    inv.error = analysis.collection.prometheus_error
    digests.refresh(session, inv.incident_id)


def _save_analyst_record(inv: Investigation, record: AnalystRecord) -> None:
    inv.analyst, inv.llm_model, inv.llm_output_mode = record.analyst, record.model, record.output_mode
    inv.prompt_tokens, inv.completion_tokens = record.prompt_tokens, record.completion_tokens
    inv.prompt_tokens_estimate, inv.llm_latency_seconds = record.prompt_tokens_estimate, record.latency_seconds
    inv.estimated_cost, inv.fallback_reason = record.estimated_cost, record.fallback_reason
    inv.disagreement, inv.evidence_fingerprint, inv.cached_from = (record.disagreement, record.fingerprint,
                                                                   record.cached_from)
    inv.prompt_trimmed, inv.llm_dropped, inv.llm_exchange = record.trimmed, record.dropped, record.exchange


def recent_llm_answer(session: Session, fingerprint: str, since: datetime,
                      exclude_id: int | None = None) -> Investigation | None:
    """The newest finished investigation since `since` with this evidence fingerprint whose LLM
    gave an answer, valid or not (the answer cache, `rca.analyst.cache`)."""
    answered = (Investigation.analyst == "llm") | Investigation.fallback_reason.startswith(INVALID_ANSWER)
    query = select(Investigation).where(
        Investigation.evidence_fingerprint == fingerprint, answered, Investigation.status == "done",
        Investigation.finished_at >= since, Investigation.id != (exclude_id or 0),
    ).order_by(Investigation.finished_at.desc()).limit(1)
    return session.scalars(query).first()


def mark_failed(session: Session, investigation_id: int, error: str, final: bool) -> None:
    """Record a failed attempt; a final failure closes the investigation as `failed`."""
    inv = session.get(Investigation, investigation_id)
    if inv is None or inv.status == "done":
        return
    inv.error = error[:2000]
    inv.status = "failed" if final else "queued"
    if final:
        inv.finished_at = utcnow()


def stranded(session: Session, older_than: timedelta) -> list[int]:
    """Claim investigations still queued (or running on a worker that died) after `older_than`:
    their enqueue was lost, e.g. because the broker was down when the webhook arrived."""
    cutoff = utcnow() - older_than
    rows = session.scalars(
        select(Investigation.id).where(
            ((Investigation.status == "queued") & (Investigation.queued_at < cutoff))
            | ((Investigation.status == "running") & (Investigation.started_at < cutoff - older_than * 4))
        ).order_by(Investigation.id).limit(500).with_for_update(skip_locked=True)
    )
    ids = list(rows)
    for inv in session.scalars(select(Investigation).where(Investigation.id.in_(ids))):
        # Re-queued now, so the next sweep leaves it alone unless this enqueue is lost too.
        inv.status, inv.queued_at = "queued", utcnow()
    return ids


def oldest_queued_age(session: Session) -> float:
    """Seconds since the oldest still-queued investigation was queued, 0 when none is: one query
    on the status index, cheap enough for every scrape."""
    oldest = session.scalar(select(func.min(Investigation.queued_at)).where(Investigation.status == "queued"))
    return max(0.0, (utcnow() - oldest).total_seconds()) if oldest is not None else 0.0
