"""Engineers' verdicts on incidents, and the service's accuracy over the confirmed ones.

AC@k is the share of confirmed incidents whose confirmed category is among the first k
hypotheses of the latest done investigation, grouped by that investigation's analyst
(`Investigation.analyst`: "rules" or "llm") and by confirmed category. An incident no
investigation diagnosed (each one inconclusive, failed or not run yet) ranked nothing to judge: it
is left out of the figures and counted apart.

Recording a verdict is the incidents room's (rca/incidents/feedback.py); this module reads them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from rca.store.models import FeedbackRow, IncidentDigestRow


def history(session: Session, incident_id: int) -> list[FeedbackRow]:
    return list(
        session.scalars(select(FeedbackRow).where(FeedbackRow.incident_id == incident_id).order_by(FeedbackRow.id))
    )


@dataclass
class Tally:
    confirmed: int = 0
    top1: int = 0
    top3: int = 0

    def add(self, confirmed: str, ranked: list[str]) -> None:
        self.confirmed += 1
        self.top1 += ranked[:1] == [confirmed]
        self.top3 += confirmed in ranked[:3]

    def as_dict(self) -> dict[str, Any]:
        n = self.confirmed
        return {
            "confirmed": n,
            "ac_at_1": round(self.top1 / n, 4) if n else None,
            "ac_at_3": round(self.top3 / n, 4) if n else None,
        }


def accuracy(session: Session) -> dict[str, Any]:
    """AC@1 and AC@3 overall, per analyst and per confirmed category. Reads the digests, where
    the confirmed category sits next to the ranked categories (a small set: humans confirm)."""
    overall = Tally()
    by_analyst: dict[str, Tally] = defaultdict(Tally)
    by_category: dict[str, Tally] = defaultdict(Tally)
    rows = session.execute(
        select(IncidentDigestRow.confirmed_category, IncidentDigestRow.categories, IncidentDigestRow.analyst).where(
            IncidentDigestRow.confirmed_category.is_not(None), IncidentDigestRow.analyst.is_not(None)
        )
    )
    for confirmed, ranked, analyst in rows:
        if confirmed is None or analyst is None:
            continue  # the query already leaves these out
        for tally in (overall, by_analyst[analyst], by_category[confirmed]):
            tally.add(confirmed, list(ranked))
    undiagnosed = session.scalar(
        select(func.count()).where(
            IncidentDigestRow.confirmed_category.is_not(None), IncidentDigestRow.analyst.is_(None)
        )
    )
    return {
        "undiagnosed": undiagnosed or 0,
        "overall": overall.as_dict(),
        "by_analyst": {name: t.as_dict() for name, t in sorted(by_analyst.items())},
        "by_category": {name: t.as_dict() for name, t in sorted(by_category.items())},
    }
