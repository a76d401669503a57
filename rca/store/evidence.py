"""The downsampled series kept with an investigation (rca.domain.series): written with its
result, read by the incident page."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from rca.domain.series import MAX_SERIES, EvidenceSeries
from rca.domain.status import InvestigationStatus
from rca.store.models import EvidenceSeriesRow, InvestigationRow


def save(session: Session, investigation_id: int, series: list[EvidenceSeries]) -> None:
    """Replace the investigation's series with these (a retried investigation stores them once)."""
    session.execute(delete(EvidenceSeriesRow).where(EvidenceSeriesRow.investigation_id == investigation_id))
    session.add_all(
        EvidenceSeriesRow(
            investigation_id=investigation_id,
            finding_key=s.key,
            labels=s.labels,
            start=s.start,
            step_seconds=s.step_seconds,
            values=s.values,
            baseline_end=s.baseline_end,
        )
        for s in series[:MAX_SERIES]
    )


def load(session: Session, investigation_id: int) -> dict[str, EvidenceSeries]:
    """The investigation's series by finding key."""
    rows = session.scalars(
        select(EvidenceSeriesRow)
        .where(EvidenceSeriesRow.investigation_id == investigation_id)
        .order_by(EvidenceSeriesRow.id)  # as saved: breached findings first
    )
    return {
        row.finding_key: EvidenceSeries(
            key=row.finding_key,
            labels=row.labels,
            start=row.start,
            step_seconds=row.step_seconds,
            values=row.values,
            baseline_end=row.baseline_end,
        )
        for row in rows
    }


def investigation_of(session: Session, incident_id: int, investigation_id: int | None) -> int | None:
    """The investigation whose series to read: `investigation_id` when it is one of the incident's,
    else (none asked) its latest finished one, whose evidence stays while a newer one runs; None
    when there is no such investigation."""
    query = select(InvestigationRow.id).where(InvestigationRow.incident_id == incident_id)
    if investigation_id is not None:
        return session.scalar(query.where(InvestigationRow.id == investigation_id))
    done = query.where(InvestigationRow.status == InvestigationStatus.DONE)
    return session.scalar(done.order_by(InvestigationRow.id.desc()).limit(1))
