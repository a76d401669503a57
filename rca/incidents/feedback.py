"""Engineers' verdicts on an incident's causes: the newest is its confirmed cause (in its search
digest, hence in the accuracy figures: rca/store/feedback.py), the earlier ones stay as history."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rca.domain.clock import utcnow
from rca.domain.status import InvestigationStatus
from rca.incidents.locks import after_change
from rca.store.models import FeedbackRow, HypothesisRow, InvestigationRow


class FeedbackError(ValueError):
    """The feedback names a cause outside the taxonomy, judges a hypothesis twice, or refers to one
    the incident does not have: `field` is the part at fault, `code` the reason's name (the API
    answers both; a page shows the message)."""

    def __init__(self, message: str, field: str, code: str) -> None:
        super().__init__(message)
        self.field, self.code = field, code


def record(
    session: Session,
    incident_id: int,
    *,
    category: str,
    note: str,
    verdicts: list[dict[str, Any]],
    author: str,
    categories: Collection[str],
    shown: int | None = None,
    owe_slack: bool = False,
) -> FeedbackRow:
    """Store one verdict about the incident's latest finished investigation and refresh its digest.
    `categories` are the taxonomy's ids, which the confirmed cause must be one of. `shown`: the
    investigation the verdict was given on (a Slack message's); refused when a newer one superseded
    it, since the verdict is recorded against the latest. `owe_slack`: the message shows it."""
    if category not in categories:
        raise FeedbackError(
            f"category {category!r} is not a taxonomy id; use one of {', '.join(categories)}",
            "category",
            "unknown_category",
        )
    judged = [v["rank"] for v in verdicts]
    if len(set(judged)) != len(judged):
        raise FeedbackError("each hypothesis rank may be judged only once", "hypotheses", "duplicate_rank")
    investigation_id = session.scalar(
        select(InvestigationRow.id)
        .where(InvestigationRow.incident_id == incident_id, InvestigationRow.status == InvestigationStatus.DONE)
        .order_by(InvestigationRow.id.desc())
        .limit(1)
    )
    if shown is not None and investigation_id is not None and shown != investigation_id:
        raise FeedbackError(
            f"investigation {shown} was superseded by investigation {investigation_id}; "
            "judge the newer one (the message now shows it)",
            "investigation",
            "superseded",
        )
    ranks = (
        set(session.scalars(select(HypothesisRow.rank).where(HypothesisRow.investigation_id == investigation_id)))
        if investigation_id
        else set()
    )
    unknown = sorted({v["rank"] for v in verdicts} - ranks)
    if unknown:
        have = ", ".join(map(str, sorted(ranks))) or "none (no finished investigation)"
        message = f"hypotheses {unknown} do not exist; the latest investigation has ranks {have}"
        raise FeedbackError(message, "hypotheses", "unknown_rank")
    row = FeedbackRow(
        incident_id=incident_id,
        investigation_id=investigation_id,
        category=category,
        note=note,
        verdicts=verdicts,
        author=author,
        created_at=utcnow(),
    )
    session.add(row)
    after_change(session, incident_id, owe_slack=owe_slack)
    return row
