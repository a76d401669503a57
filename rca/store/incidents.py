"""Read side of incidents: search the history (full text, filters, keyset pages) and fetch one
incident with everything in it. Search reads `incident_digests` (see `rca.store.digests`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, and_, case, func, literal, null, select, text, tuple_
from sqlalchemy.orm import Session, selectinload

from rca.domain.clock import utcnow
from rca.store import fts, word_frequency
from rca.store.models import IncidentDigestRow, IncidentRow, InvestigationRow, SlackDeliveryRow

Sort = Literal["time", "relevance"]
RELEVANCE_WINDOW = 250
FIRST_STAGE = 1000


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
    origin: str | None = None  # "alertmanager", "early_warning" (the fleet scan) or "backtest" (its replay, stored)


@dataclass(frozen=True)
class Position:
    """Where the previous page ended: its last item's sort key."""

    created_at: datetime
    incident_id: int
    score: float | None = None
    anchor: datetime | None = None  # relevance only: the snapshot time of the first page


@dataclass(frozen=True)
class Hit:
    """One incident of a result page: what a list shows, without the large text and JSON."""

    incident_id: int
    title: str
    status: str
    alertname: str | None
    created_at: datetime
    updated_at: datetime
    resolved_at: datetime | None
    notification_count: int
    investigation_status: str | None  # of the newest investigation, read live
    top_category: str | None
    top_confidence: float | None
    confirmed_category: str | None
    breached: list[str]
    score: float | None = None
    # Who opened it: a webhook, the fleet scan ("early_warning") or its replay ("backtest").
    origin: str = "alertmanager"
    inconclusive_reason: str | None = None  # of the newest investigation, when it read no evidence


def _conditions(
    session: Session, filters: IncidentFilter
) -> tuple[list[ColumnElement[bool]], list[ColumnElement[bool]]]:
    """The filters but `q` as (ordered, checked) conditions. Ordered ones are equalities and ranges
    that a (column, created_at) B-tree serves while walking newest first; checked ones (labels,
    breached signals) are GIN-indexed containment, checked row by row during such a walk."""
    d = IncidentDigestRow
    ordered: list[ColumnElement[bool]] = []
    if filters.status:
        ordered.append(d.status == filters.status)
    if filters.since:
        ordered.append(d.created_at >= filters.since)
    if filters.until:
        ordered.append(d.created_at < filters.until)
    if filters.category:
        ordered.append(d.top_category == filters.category)
    if filters.confirmed is not None:
        ordered.append(d.confirmed_category.is_not(None) if filters.confirmed else d.confirmed_category.is_(None))
    if filters.confirmed_category:
        ordered.append(d.confirmed_category == filters.confirmed_category)
    checked: list[ColumnElement[bool]] = []
    if filters.alertname:
        checked.append(fts.contains(session, d.labels, f"alertname={filters.alertname}"))
    checked += [fts.contains(session, d.labels, f"{name}={value}") for name, value in filters.labels]
    checked += [fts.contains(session, d.breached, key) for key in filters.signals]
    if filters.origin:
        checked.append(d.incident_id.in_(select(IncidentRow.id).where(IncidentRow.origin == filters.origin)))
    return ordered, checked


Match = tuple[int, float | None]  # incident id, and its relevance when asked for


def _newest(
    session: Session,
    filters: IncidentFilter,
    n: int,
    *,
    before: Position | None = None,
    anchor: datetime | None = None,
    scored: bool = False,
) -> list[Match]:
    """The `n` newest matching incidents (older than `before`, no newer than `anchor`), with
    their relevance to `filters.q` if `scored`.

    Postgres misjudges how many incidents match a combination of conditions (a breached signal and
    the cause it implies are far from independent; so are "prefix" and "cache"), and a wrong guess
    costs a bitmap of every match, or a walk through all history. So the plan is chosen by
    measuring instead: walk the newest incidents that pass the ordered conditions in growing
    stages, checking the others row by row, and once the matches seen are too sparse for walking
    on to pay (`_walk_pays`), fetch the rest from below the walk with the GIN indexes.
    """
    d = IncidentDigestRow
    ordered, checked = _conditions(session, filters)
    indexed = checked
    if filters.q:
        text_query = fts.prepare(session, filters.q)
        checked, indexed = [text_query.condition, *checked], [text_query.indexed, *checked]
    if before is not None:
        ordered.append(tuple_(d.created_at, d.incident_id) < tuple_(before.created_at, before.incident_id))
    if anchor is not None:
        ordered.append(d.created_at <= anchor)
    newest_first = (d.created_at.desc(), d.incident_id.desc())
    rank = fts.rank(session, filters.q) if scored and filters.q else None
    if not checked or not fts.is_postgres(session):
        found = list(session.scalars(select(d.incident_id).where(*ordered, *checked).order_by(*newest_first).limit(n)))
        scores = fts.sqlite_scores(session, filters.q, found) if scored and filters.q else {}
        return [(incident_id, scores.get(incident_id)) for incident_id in found]
    # A match's score (0 when not scored) is computed while its row is at hand; NULL marks a miss.
    value = rank if rank is not None else literal(0.0)
    score = case((and_(*checked), value), else_=null())
    matches: list[Match] = []
    walked, stage, below = 0, FIRST_STAGE, None
    # The rarest word bounds the density: when even that bound is too sparse, do not walk at all.
    population = word_frequency.statistics(session).rows
    walk = not filters.q or _walk_pays(text_query.density, n, population)
    while walk:
        position: list[ColumnElement[bool]] = [tuple_(d.created_at, d.incident_id) < tuple_(*below)] if below else []
        step = (
            select(d.incident_id, d.created_at, score.label("score"))
            .where(*ordered, *position)
            .order_by(*newest_first)
            .limit(stage)
            .subquery()
        )
        matches += session.execute(
            select(step.c.incident_id, step.c.score)
            .where(step.c.score.is_not(None))
            .order_by(step.c.created_at.desc(), step.c.incident_id.desc())
            .limit(n - len(matches))
        ).all()
        if len(matches) == n:
            return _scored(matches, rank)
        end = session.execute(
            select(d.created_at, d.incident_id)
            .where(*ordered, *position)
            .order_by(*newest_first)
            .offset(stage - 1)
            .limit(1)
        ).first()
        if end is None:  # every incident that passes the ordered conditions has been seen
            return _scored(matches, rank)
        walked, below = walked + stage, (end.created_at, end.incident_id)
        walk = _walk_pays(len(matches) / walked, n - len(matches), max(population - walked, walked))
        stage *= 4
    position = [tuple_(d.created_at, d.incident_id) < tuple_(*below)] if below else []
    _planner(session, walk=False)
    matches += session.execute(
        select(d.incident_id, value)
        .where(*ordered, *indexed, *position)
        .order_by(*newest_first)
        .limit(n - len(matches))
    ).all()
    _planner(session, walk=True)
    return _scored(matches, rank)


def _scored(matches: list[Match], rank: ColumnElement[float] | None) -> list[Match]:
    return matches if rank is not None else [(incident_id, None) for incident_id, _ in matches]


def _walk_pays(density: float, wanted: int, remaining: int) -> bool:
    """Whether walking on (about wanted / density rows, each ~2 µs) is cheaper than a bitmap of
    every remaining match (about density x remaining, each ~4 µs), as measured on this machine at
    a million incidents (bench/search_latency.py)."""
    return density > 0 and 2 * wanted / density < 4 * density * remaining


def _planner(session: Session, *, walk: bool) -> None:
    """Allow (or, for the rest of a sparse search, forbid) index walks and sequential scans, for
    this transaction only."""
    value = "on" if walk else "off"
    session.execute(
        text("SELECT set_config('enable_indexscan', :v, true), set_config('enable_seqscan', :v, true)"), {"v": value}
    )


def search(
    session: Session, *, filters: IncidentFilter, sort: Sort, limit: int, after: Position | None = None
) -> tuple[list[Hit], bool, datetime | None]:
    """One page of matching incidents, whether more follow, and (relevance only) the snapshot time.

    Time order is newest first by (created_at, id) and continues strictly after `after`: incidents
    inserted meanwhile are newer than any cursor, so they never shift or repeat a later page.

    Relevance order ranks, by full-text score then id, the newest `RELEVANCE_WINDOW` matches that
    existed when the first page was asked for (`anchor`, carried by the cursor). Scoring every
    match of a common word at a million incidents would cost seconds; bounding it keeps the cost
    that of finding the newest matches. The snapshot makes later pages stable: incidents arriving
    meanwhile are left out and no page repeats or skips one. Older matches are reached with
    sort=time.
    """
    if sort == "relevance" and filters.q:
        anchor = after.anchor if after is not None and after.anchor else utcnow()
        window = _newest(session, filters, RELEVANCE_WINDOW, anchor=anchor, scored=True)
        scores = {incident_id: score or 0.0 for incident_id, score in window}
        ranked = sorted(((score, incident_id) for incident_id, score in scores.items()), reverse=True)
        if after is not None and after.score is not None:
            ranked = [pair for pair in ranked if pair < (after.score, after.incident_id)]
        page = [incident_id for _, incident_id in ranked[: limit + 1]]
        return hits(session, page[:limit], scores), len(page) > limit, anchor
    page = [incident_id for incident_id, _ in _newest(session, filters, limit + 1, before=after)]
    return hits(session, page[:limit]), len(page) > limit, None


def hits(session: Session, incident_ids: list[int], scores: Mapping[int, float | None] | None = None) -> list[Hit]:
    """The list view of these incidents, in the order given, in one query."""
    if not incident_ids:
        return []
    d, i = IncidentDigestRow, IncidentRow

    def newest_run(column: Any, label: str) -> Any:
        return (
            select(column)
            .where(InvestigationRow.incident_id == d.incident_id)
            .order_by(InvestigationRow.id.desc())
            .limit(1)
            .scalar_subquery()
            .label(label)
        )

    # Each column is labelled as the `Hit` field it fills.
    rows = session.execute(
        select(
            d.incident_id,
            i.title,
            i.status,
            i.alertname,
            i.created_at,
            i.updated_at,
            i.resolved_at,
            i.notification_count,
            newest_run(InvestigationRow.status, "investigation_status"),
            d.top_category,
            d.top_confidence,
            d.confirmed_category,
            d.breached,
            i.origin,
            newest_run(InvestigationRow.inconclusive_reason, "inconclusive_reason"),
        )
        .join(i, i.id == d.incident_id)
        .where(d.incident_id.in_(incident_ids))
    )
    found = {row.incident_id: Hit(**row._asdict(), score=(scores or {}).get(row.incident_id)) for row in rows}
    return [found[n] for n in incident_ids if n in found]


def count(session: Session, *, filters: IncidentFilter, cap: int) -> int:
    """How many incidents match, counting no further than `cap`. Costly for common words and
    filters at a million incidents (a bitmap of every match), hence only on request."""
    ordered, checked = _conditions(session, filters)
    if filters.q:
        checked.append(fts.prepare(session, filters.q).indexed)
    capped = select(IncidentDigestRow.incident_id).where(*ordered, *checked).limit(cap).subquery()
    return session.scalar(select(func.count()).select_from(capped)) or 0


def get(session: Session, *, incident_id: int) -> IncidentRow | None:
    """One incident with its alerts and every investigation's findings and hypotheses."""
    return session.scalar(
        select(IncidentRow)
        .where(IncidentRow.id == incident_id)
        .options(
            selectinload(IncidentRow.alerts),
            selectinload(IncidentRow.investigations).selectinload(InvestigationRow.findings),
            selectinload(IncidentRow.investigations).selectinload(InvestigationRow.hypotheses),
            selectinload(IncidentRow.slack_delivery).selectinload(SlackDeliveryRow.attempts),
        )
    )
