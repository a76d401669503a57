"""Searching the incident history: the filters checked, a page of hits, the cursor to the next
page and the count. The API's `GET /api/v1/incidents` and the pages' list ask it the same way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from rca.domain import early_warning
from rca.domain.clock import in_utc
from rca.queries.cursor import decode_cursor, encode_cursor
from rca.queries.errors import Problem, QueryError
from rca.store import fts
from rca.store import incidents as incident_store

STATUSES = ("firing", "resolved")
ORIGINS = ("alertmanager", *early_warning.SCANNED)
TOTAL_CAP = 1000  # matches counted at most


@dataclass(frozen=True)
class Search:
    """What to search for: free text `q` (every word must match) and filters, all ANDed."""

    q: str | None = None
    status: str | None = None  # one of STATUSES
    alertname: str | None = None
    labels: Sequence[str] = ()  # name=value
    signals: Sequence[str] = ()  # breached finding keys
    category: str | None = None  # the top-ranked cause
    confirmed: bool | None = None
    confirmed_category: str | None = None
    origin: str | None = None  # one of ORIGINS
    since: datetime | None = None
    until: datetime | None = None
    sort: incident_store.Sort | None = None  # default: relevance with q, else time (newest first)
    limit: int = 50
    cursor: str | None = None  # the previous page's next_cursor
    total: bool = False  # count the matches even when they fill more than one page


@dataclass(frozen=True)
class Page:
    hits: list[incident_store.Hit]
    total: int | None  # up to TOTAL_CAP; None when not counted
    total_exact: bool
    limit: int
    sort: str
    next_cursor: str | None


def search_of_form(fields: Mapping[str, str | None], *, limit: int, cursor: str | None) -> Search:
    """A search from text fields (a page's form: blank is None, `confirmed` yes or no, one label and
    one signal); every value outside its choices is a problem of the one QueryError."""
    problems = []
    if fields.get("status") not in (None, *STATUSES):
        problems.append(Problem("status", "status must be firing or resolved", "invalid_choice"))
    if fields.get("confirmed") not in (None, "yes", "no"):
        problems.append(Problem("confirmed", "confirmed must be yes or no", "invalid_choice"))
    if fields.get("origin") not in (None, *ORIGINS):
        problems.append(
            Problem("origin", f"origin must be {', '.join(ORIGINS[:-1])} or {ORIGINS[-1]}", "invalid_choice")
        )
    if problems:
        raise QueryError(*problems)
    label, signal, confirmed = fields.get("label"), fields.get("signal"), fields.get("confirmed")
    return Search(
        q=fields.get("q"),
        status=fields.get("status"),
        alertname=fields.get("alertname"),
        labels=[label] if label else [],
        signals=[signal] if signal else [],
        category=fields.get("category"),
        confirmed=None if confirmed is None else confirmed == "yes",
        confirmed_category=fields.get("confirmed_category"),
        origin=fields.get("origin"),
        limit=limit,
        cursor=cursor,
    )


def _labels(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise QueryError.of("label", f"label filter {item!r} must look like name=value", "invalid_label_filter")
        pairs.append((name, value))
    return tuple(pairs)


def _in_utc(value: datetime | None, name: str) -> datetime | None:
    try:
        return in_utc(value) if value is not None else None
    except ValueError:
        raise QueryError.of(name, f"{name} is out of range once converted to UTC", "datetime_out_of_range") from None


def search(session: Session, asked: Search) -> Page:
    """One page of the incidents that match `asked`; a QueryError when it cannot be answered."""
    since, until = _in_utc(asked.since, "since"), _in_utc(asked.until, "until")
    if since and until and since >= until:
        raise QueryError.of("until", "since must be before until", "invalid_time_range")
    q = asked.q
    if q is not None and not fts.words(q):
        raise QueryError.of("q", "q has no searchable words (letters or digits)", "no_searchable_words")
    order = asked.sort or ("relevance" if q else "time")
    if order == "relevance" and not q:
        raise QueryError.of("sort", "sort=relevance needs a full-text query q", "relevance_without_q")
    filters = incident_store.IncidentFilter(
        q=q,
        status=asked.status,
        alertname=asked.alertname,
        labels=_labels(asked.labels),
        since=since,
        until=until,
        signals=tuple(asked.signals),
        category=asked.category,
        confirmed=asked.confirmed,
        confirmed_category=asked.confirmed_category,
        origin=asked.origin,
    )
    after = decode_cursor(asked.cursor, order, filters) if asked.cursor else None
    hits, more, anchor = incident_store.search(session, filters=filters, sort=order, limit=asked.limit, after=after)
    # A first page without a next one already holds every match; a longer result is counted on request.
    counted: int | None = len(hits) if asked.cursor is None and not more else None
    if asked.total and counted is None:
        counted = incident_store.count(session, filters=filters, cap=TOTAL_CAP + 1)
    return Page(
        hits=hits,
        total=None if counted is None else min(counted, TOTAL_CAP),
        total_exact=counted is not None and counted <= TOTAL_CAP,
        limit=asked.limit,
        sort=order,
        next_cursor=encode_cursor(hits[-1], order, filters, anchor) if more else None,
    )
