"""The LLM answer cache in the database (the analyst's `AnswerCache` protocol): earlier
investigations whose LLM answered the same answer key, newest first."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from rca.domain.analyst import INVALID_ANSWER, CachedAnswer
from rca.domain.clock import utcnow
from rca.domain.evidence import Hypothesis
from rca.domain.status import Analyst, InvestigationStatus
from rca.store.db import session_scope
from rca.store.models import HypothesisRow, InvestigationRow


class DatabaseAnswerCache:
    def __init__(self, database_url: str, window_seconds: int, exclude_investigation_id: int | None = None) -> None:
        self.database_url = database_url
        self.window = timedelta(seconds=window_seconds)
        self.exclude = exclude_investigation_id

    def lookup(self, answer_key: str) -> CachedAnswer | None:
        if self.window <= timedelta(0):
            return None
        with session_scope(self.database_url) as session:
            row = recent_llm_answer(session, answer_key, since=utcnow() - self.window, exclude_id=self.exclude)
            if row is None:
                return None
            if row.analyst != Analyst.LLM:
                return CachedAnswer(row.id, [], row.llm_model, invalid_reason=row.fallback_reason)
            hypotheses = [_hypothesis(h) for h in row.hypotheses]
            return CachedAnswer(row.id, hypotheses, row.llm_model)


def _hypothesis(row: HypothesisRow) -> Hypothesis:
    """A stored hypothesis as the analyst's (its score is not stored). Lists leave the session as
    plain lists, not the ORM's tracked ones."""
    return Hypothesis(
        rank=row.rank,
        category=row.category,
        title=row.title,
        confidence=row.confidence,
        evidence=list(row.evidence),
        contradicting=list(row.contradicting),
        next_steps=list(row.next_steps),
        explanation=row.explanation,
        analyst=row.analyst,
    )


def recent_llm_answer(
    session: Session, answer_key: str, since: datetime, exclude_id: int | None = None
) -> InvestigationRow | None:
    """The newest finished investigation since `since` with this answer key whose LLM gave an
    answer, valid or not."""
    answered = (InvestigationRow.analyst == Analyst.LLM) | InvestigationRow.fallback_reason.startswith(INVALID_ANSWER)
    query = (
        select(InvestigationRow)
        .where(
            InvestigationRow.answer_key == answer_key,
            answered,
            InvestigationRow.status == InvestigationStatus.DONE,
            InvestigationRow.finished_at >= since,
            InvestigationRow.id != (exclude_id or 0),
        )
        .order_by(InvestigationRow.finished_at.desc())
        .limit(1)
    )
    return session.scalars(query).first()
