"""Read side of incidents: search the history (full text, filters, keyset pages) and fetch one
incident with everything in it. Search reads `incident_digests` (see `rca.store.digests`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, and_, func, or_, select, text, tuple_
from sqlalchemy.orm import Session, load_only, selectinload

from rca.store import fts
from rca.store.models import Incident, IncidentDigest, Investigation, SlackDelivery, utcnow

Sort = Literal["time", "relevance"]
RELEVANCE_WINDOW = 1000


@dataclass(frozen=True)
class IncidentFilter:
    q: str | None = None
    status: str | None = None
    alertname: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    signals: tuple[str, ...] = ()  # breached finding keys, all required
    category: str | None = None  # top-ranked root cause of the latest finished investigation
    confirmed: bool | None = None  # an engineer confirmed (or corrected) the cause
    confirmed_category: str | None = None


@dataclass(frozen=True)
class Position:
    """Where the previous page ended: its last item's sort key."""

    created_at: datetime
    incident_id: int
    score: float | None = None
    anchor: datetime | None = None  # relevance only: the snapshot time of the first page


@dataclass(frozen=True)
class Hit:
    incident: Incident
    digest: IncidentDigest
    score: float | None
    investigation_status: str | None


def _conditions(session: Session, filters: IncidentFilter) -> list[ColumnElement[bool]]:
    d = IncidentDigest
    where: list[ColumnElement[bool]] = []
    if filters.status:
        where.append(d.status == filters.status)
    if filters.alertname:
        where.append(fts.contains(session, d.labels, f"alertname={filters.alertname}"))
    where += [fts.contains(session, d.labels, f"{name}={value}") for name, value in filters.labels]
    where += [fts.contains(session, d.breached, key) for key in filters.signals]
    if filters.since:
        where.append(d.created_at >= filters.since)
    if filters.until:
        where.append(d.created_at < filters.until)
    if filters.category:
        where.append(d.top_category == filters.category)
    if filters.confirmed is not None:
        where.append(d.confirmed_category.is_not(None) if filters.confirmed else d.confirmed_category.is_(None))
    if filters.confirmed_category:
        where.append(d.confirmed_category == filters.confirmed_category)
    return where


def search(session: Session, *, filters: IncidentFilter, sort: Sort, limit: int,
           after: Position | None = None, many: bool = False) -> tuple[list[Hit], bool, datetime | None]:
    """One page of matching incidents, whether more follow, and (relevance only) the snapshot time.

    Time order is newest first by (created_at, id) and continues strictly after `after`: incidents
    inserted meanwhile are newer than any cursor, so they never shift or repeat a later page.

    Relevance order ranks, by full-text score then id, the newest `RELEVANCE_WINDOW` matches that
    existed when the first page was asked for (`anchor`, carried by the cursor). Scoring every
    match of a common word at a million incidents would cost seconds; bounding it keeps the query
    on the (created_at) index. The snapshot makes later pages stable: incidents arriving meanwhile
    are left out and no page repeats or skips one. Older matches are reached with sort=time.
    """
    d = IncidentDigest
    ids: Any = select(d.incident_id, d.created_at)
    if filters.q:
        ids, _ = fts.apply_match(session, ids, filters.q)
    ids = ids.where(*_conditions(session, filters))
    anchor = None
    if sort == "relevance" and filters.q:
        anchor = after.anchor if after is not None and after.anchor else utcnow()
        window = ids.where(d.created_at <= anchor).order_by(d.created_at.desc(), d.incident_id.desc()) \
            .limit(RELEVANCE_WINDOW).subquery()
        ranked, score = fts.apply_match(session, select(d.incident_id, d.created_at), filters.q)
        ranked = ranked.where(d.incident_id.in_(select(window.c.incident_id))).add_columns(score)
        if after is not None and after.score is not None:
            beyond = or_(score < after.score, and_(score == after.score, d.incident_id < after.incident_id))
            ranked = ranked.where(beyond)
        page = ranked.order_by(score.desc(), d.incident_id.desc())
    else:
        if after is not None:
            ids = ids.where(tuple_(d.created_at, d.incident_id) < tuple_(after.created_at, after.incident_id))
        page = ids.order_by(d.created_at.desc(), d.incident_id.desc())
    walk = many and fts.is_postgres(session)
    if walk:
        session.execute(text("SET LOCAL enable_bitmapscan = off"))
    order = [row[0] for row in session.execute(page.limit(limit + 1))]
    if walk:
        session.execute(text("SET LOCAL enable_bitmapscan = on"))
    more = len(order) > limit
    order = order[:limit]
    return _hits(session, order, filters.q), more, anchor


SUMMARY_DIGEST = (IncidentDigest.incident_id, IncidentDigest.created_at, IncidentDigest.breached,
                  IncidentDigest.top_category, IncidentDigest.top_confidence, IncidentDigest.confirmed_category)
SUMMARY_INCIDENT = (Incident.id, Incident.title, Incident.status, Incident.alertname, Incident.created_at,
                    Incident.updated_at, Incident.resolved_at, Incident.notification_count)


def _hits(session: Session, incident_ids: list[int], q: str | None) -> list[Hit]:
    """The digests and incidents of one page, in the page's order, with their scores for `q`."""
    if not incident_ids:
        return []
    d = IncidentDigest
    rows: Any = (select(d, Incident).join(Incident, Incident.id == d.incident_id)
                 .where(d.incident_id.in_(incident_ids))
                 .options(load_only(*SUMMARY_DIGEST), load_only(*SUMMARY_INCIDENT)))  # not the large text and JSON
    if q:
        rows, score = fts.apply_match(session, rows, q)
        rows = rows.add_columns(score)
    found = {row[0].incident_id: row for row in session.execute(rows)}
    statuses = latest_investigation_status(session, incident_ids)
    return [Hit(incident=found[i][1], digest=found[i][0], score=found[i][2] if q else None,
                investigation_status=statuses.get(i)) for i in incident_ids if i in found]


def count(session: Session, *, filters: IncidentFilter, cap: int) -> int:
    """How many incidents match, counting no further than `cap` (an exact count of a common word
    over a million incidents would cost more than the page itself)."""
    query: Any = select(IncidentDigest.incident_id)
    if filters.q:
        query, _ = fts.apply_match(session, query, filters.q)
    capped = query.where(*_conditions(session, filters)).limit(cap).subquery()
    return session.scalar(select(func.count()).select_from(capped)) or 0


def latest_investigation_status(session: Session, incident_ids: list[int]) -> dict[int, str]:
    """The status of each incident's newest investigation (read live: it changes as workers run)."""
    if not incident_ids:
        return {}
    rows = session.execute(select(Investigation.incident_id, Investigation.status)
                           .where(Investigation.incident_id.in_(incident_ids)).order_by(Investigation.id))
    return {incident_id: status for incident_id, status in rows}


def get(session: Session, *, incident_id: int) -> Incident | None:
    """One incident with its alerts and every investigation's findings and hypotheses."""
    return session.scalar(
        select(Incident)
        .where(Incident.id == incident_id)
        .options(
            selectinload(Incident.alerts),
            selectinload(Incident.investigations).selectinload(Investigation.findings),
            selectinload(Incident.investigations).selectinload(Investigation.hypotheses),
            selectinload(Incident.slack_delivery).selectinload(SlackDelivery.attempts),
        )
    )
