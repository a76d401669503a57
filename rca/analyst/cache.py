"""Reuse an LLM answer for the same evidence: an investigation whose evidence fingerprint matches
one the LLM answered within `RCA_LLM_CACHE_SECONDS` takes that answer instead of calling the model.
An answer that failed validation is reused too (as the reason the rules answer): at temperature 0
the same prompt would fail the same way. Failures without an answer (timeouts, 429, 5xx) are not.

The answers live where investigations do (the database), so every worker process and the
embedded mode share them, and a cached answer always points at the investigation it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

from rca.diagnosis.ranking import Hypothesis
from rca.store import investigations
from rca.store.db import session_scope
from rca.store.models import utcnow


@dataclass
class CachedAnswer:
    investigation_id: int
    hypotheses: list[Hypothesis]  # the LLM's, or empty when its answer was invalid
    model: str | None
    invalid_reason: str | None = None


class AnswerCache(Protocol):
    def lookup(self, fingerprint: str) -> CachedAnswer | None: ...


class DatabaseAnswerCache:
    """Earlier investigations in the database, answered by the LLM, newest first."""

    def __init__(self, database_url: str, window_seconds: int, exclude_investigation_id: int | None = None) -> None:
        self.database_url = database_url
        self.window = timedelta(seconds=window_seconds)
        self.exclude = exclude_investigation_id

    def lookup(self, fingerprint: str) -> CachedAnswer | None:
        if self.window <= timedelta(0):
            return None
        with session_scope(self.database_url) as session:
            row = investigations.recent_llm_answer(session, fingerprint, since=utcnow() - self.window,
                                                   exclude_id=self.exclude)
            if row is None:
                return None
            if row.analyst != "llm":
                return CachedAnswer(row.id, [], row.llm_model, invalid_reason=row.fallback_reason)
            hypotheses = [Hypothesis(rank=h.rank, category=h.category, title=h.title, confidence=h.confidence,
                                     evidence=list(h.evidence), contradicting=list(h.contradicting),
                                     next_steps=list(h.next_steps), explanation=h.explanation, analyst=h.analyst)
                          for h in row.hypotheses]
            return CachedAnswer(row.id, hypotheses, row.llm_model)
