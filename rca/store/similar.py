"""Similar past incidents by evidence signature: which findings breached, in which order, on
which serving stack, and which causes ranked on top.

Scoring (0..1): 0.5 x Jaccard of the breached sets + 0.2 x order agreement (same first mover
counts half, the other half is the share of shared pairs that moved in the same order)
+ 0.15 x same stack + 0.15 x category overlap (same top cause, else Jaccard of the top three).

At a million incidents the candidates come from indexed buckets only, the newest `CANDIDATES` of
each: exactly the same breached set (`breached_key`), the same first mover breached (GIN on
Postgres), the same top cause, and confirmed with that cause. So a match is found among recent
look-alikes, not among all history: an old incident in none of the four buckets is not scored.

`precedents` picks those alike enough to cite, confirmed ones first: Slack's "Last time" line
and the LLM prompt's similar incidents (docs/history.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from itertools import combinations
from typing import Any

from sqlalchemy import select, union_all
from sqlalchemy.orm import Session

from rca.domain.evidence import onset_order
from rca.store import fts
from rca.store.digests import breached_key
from rca.store.incidents import Hit, hits
from rca.store.models import IncidentDigestRow

CANDIDATES = 50
CITE_SCORE = 0.6  # alike enough to cite in Slack and in the LLM prompt (`precedents`)
WEIGHTS = {"breached": 0.5, "order": 0.2, "stack": 0.15, "categories": 0.15}
SIGNATURE = (
    IncidentDigestRow.incident_id,
    IncidentDigestRow.created_at,
    IncidentDigestRow.breached,
    IncidentDigestRow.onset_order,
    IncidentDigestRow.stack,
    IncidentDigestRow.categories,
    IncidentDigestRow.confirmed_category,
)


@dataclass(frozen=True)
class Signature:
    """The evidence signature of one incident: what similarity compares."""

    incident_id: int
    created_at: datetime
    breached: list[str]
    onset_order: list[str]
    stack: str | None
    categories: list[str]
    confirmed_category: str | None


@dataclass(frozen=True)
class Match:
    hit: Hit
    signature: Signature
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


def score(signature: Signature, other: Signature) -> float:
    parts = {
        "breached": _jaccard(set(signature.breached), set(other.breached)),
        "order": _order_agreement(signature.onset_order, other.onset_order),
        "stack": 1.0 if signature.stack and signature.stack == other.stack else 0.0,
        "categories": _categories(signature.categories, other.categories),
    }
    return round(sum(WEIGHTS[name] * value for name, value in parts.items()), 4)


def signature(session: Session, incident_id: int) -> Signature | None:
    d = IncidentDigestRow
    row = session.execute(select(*SIGNATURE).where(d.incident_id == incident_id)).first()
    return Signature(*row) if row else None


def find(session: Session, signature: Signature, limit: int) -> list[Match]:
    """Past incidents most like `target`, best first. An incident without a finished
    investigation has no signature and so no similar incidents."""
    if not signature.breached and not signature.categories:
        return []
    d = IncidentDigestRow
    past = (d.created_at <= signature.created_at) & (d.incident_id != signature.incident_id)
    buckets = []
    if signature.breached:
        buckets.append(d.breached_key == breached_key(signature.breached))
    leads = signature.onset_order or signature.breached
    lead = leads[0] if leads else None
    if lead:
        buckets.append(fts.contains(session, d.breached, lead))
    if signature.categories:
        buckets += [d.top_category == signature.categories[0], d.confirmed_category == signature.categories[0]]
    # One round trip: the newest CANDIDATES signatures of each bucket (each on its own index).
    newest = [
        select(*SIGNATURE).where(bucket, past).order_by(d.created_at.desc()).limit(CANDIDATES).subquery()
        for bucket in buckets
    ]
    rows = session.execute(union_all(*(select(*sub.c) for sub in newest)))
    candidates = list({row[0]: Signature(*row) for row in rows}.values())
    scored = [(score(signature, other), other) for other in candidates]
    scored = [pair for pair in scored if pair[0] > 0]
    scored.sort(key=lambda pair: (pair[0], pair[1].confirmed_category is not None, pair[1].created_at), reverse=True)
    best = scored[:limit]
    listed = {hit.incident_id: hit for hit in hits(session, [other.incident_id for _, other in best])}
    return [
        Match(
            hit=listed[other.incident_id],
            signature=other,
            score=value,
            shared=sorted(set(signature.breached) & set(other.breached)),
        )
        for value, other in best
        if other.incident_id in listed
    ]


@dataclass(frozen=True)
class Precedent:
    """A past incident worth citing ("last time: prefix_cache_miss, confirmed")."""

    incident_id: int
    title: str
    created_at: datetime
    category: str | None  # the confirmed cause, else the top-ranked one
    confirmed: bool
    score: float


def signature_of(
    incident_id: int, created_at: datetime, findings: list[Any], categories: list[str], stack: str | None
) -> Signature:
    """The signature of a fresh analysis (before it is stored and its digest rewritten)."""
    return Signature(
        incident_id=incident_id,
        created_at=created_at,
        breached=sorted(f.key for f in findings if f.breached),
        onset_order=onset_order(findings),
        stack=stack,
        categories=categories[:3],
        confirmed_category=None,
    )


def precedents(session: Session, signature: Signature, limit: int = 3) -> list[Precedent]:
    """Past incidents alike enough to cite (score >= CITE_SCORE): those an engineer confirmed
    first, since their cause is known, then by score."""
    matches = [m for m in find(session, signature, 10) if m.score >= CITE_SCORE]
    matches.sort(key=lambda m: (m.signature.confirmed_category is not None, m.score), reverse=True)
    return [
        Precedent(
            incident_id=m.hit.incident_id,
            title=m.hit.title,
            created_at=m.hit.created_at,
            category=m.signature.confirmed_category or m.hit.top_category,
            confirmed=m.signature.confirmed_category is not None,
            score=m.score,
        )
        for m in matches[:limit]
    ]
