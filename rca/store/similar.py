"""Similar past incidents by evidence signature: which findings breached, in which order, on
which serving stack, and which causes ranked on top.

Scoring (0..1): 0.5 x Jaccard of the breached sets + 0.2 x order agreement (same first mover
counts half, the other half is the share of shared pairs that moved in the same order)
+ 0.15 x same stack + 0.15 x category overlap (same top cause, else Jaccard of the top three).

At a million incidents the candidates come from indexed buckets only, the newest `CANDIDATES` of
each: exactly the same breached set (`breached_key`), the same first mover breached (GIN on
Postgres), the same top cause, and confirmed with that cause. So a match is found among recent
look-alikes, not among all history: an old incident in none of the four buckets is not scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from sqlalchemy import select
from sqlalchemy.orm import Session

from rca.store import fts
from rca.store.models import Incident, IncidentDigest

CANDIDATES = 200
WEIGHTS = {"breached": 0.5, "order": 0.2, "stack": 0.15, "categories": 0.15}


@dataclass(frozen=True)
class Match:
    incident: Incident
    digest: IncidentDigest
    score: float
    shared: list[str]


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def _order_agreement(a: list[str], b: list[str]) -> float:
    if not a or not b:
        return 0.0
    first = 0.5 if a[0] == b[0] else 0.0
    shared = [k for k in a if k in b]
    pairs = list(combinations(shared, 2))
    if not pairs:
        return first + (0.5 if first and len(shared) == 1 else 0.0)
    pos = {k: i for i, k in enumerate(b)}
    agree = sum(1 for x, y in pairs if pos[x] < pos[y])  # x precedes y in a by construction
    return first + 0.5 * agree / len(pairs)


def _categories(a: list[str], b: list[str]) -> float:
    if a and b and a[0] == b[0]:
        return 1.0
    return _jaccard(set(a), set(b))


def score(target: IncidentDigest, other: IncidentDigest) -> float:
    parts = {
        "breached": _jaccard(set(target.breached), set(other.breached)),
        "order": _order_agreement(target.onset_order, other.onset_order),
        "stack": 1.0 if target.stack and target.stack == other.stack else 0.0,
        "categories": _categories(target.categories, other.categories),
    }
    return round(sum(WEIGHTS[name] * value for name, value in parts.items()), 4)


def find(session: Session, incident_id: int, limit: int) -> list[Match] | None:
    """Past incidents most like this one, best first; None if the incident does not exist. An
    incident without a finished investigation has no signature and so no similar incidents."""
    target = session.get(IncidentDigest, incident_id)
    if target is None:
        return None
    if not target.breached and not target.top_category:
        return []
    d = IncidentDigest
    past = (d.created_at <= target.created_at) & (d.incident_id != incident_id)
    buckets = []
    if target.breached_key:
        buckets.append(select(d.incident_id).where(d.breached_key == target.breached_key, past))
    lead = (target.onset_order or target.breached or [None])[0]
    if lead:
        buckets.append(select(d.incident_id).where(fts.contains(session, d.breached, lead), past))
    if target.top_category:
        buckets.append(select(d.incident_id).where(d.top_category == target.top_category, past))
        buckets.append(select(d.incident_id).where(d.confirmed_category == target.top_category, past))
    ids: set[int] = set()
    for bucket in buckets:
        ids.update(session.scalars(bucket.order_by(d.created_at.desc()).limit(CANDIDATES)))
    if not ids:
        return []
    rows = session.execute(select(d, Incident).join(Incident, Incident.id == d.incident_id)
                           .where(d.incident_id.in_(ids))).all()
    matches = [Match(incident=inc, digest=dig, score=score(target, dig),
                     shared=sorted(set(target.breached) & set(dig.breached))) for dig, inc in rows]
    matches.sort(key=lambda m: (m.score, m.digest.confirmed_category is not None, m.digest.created_at), reverse=True)
    return [m for m in matches if m.score > 0][:limit]
