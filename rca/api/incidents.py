"""Incident history API: search (`GET /api/v1/incidents`), one incident, similar incidents and feedback."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from pydantic import AwareDatetime

from rca.api.auth import require_api_token
from rca.api.cursor import decode_cursor, encode_cursor
from rca.api.schemas import TOTAL_CAP, AlertOut, IncidentOut, IncidentPage, IncidentSummary, InvestigationOut
from rca.store import incidents as incident_store
from rca.store import fts
from rca.store.db import session_scope
from rca.store.models import Incident

router = APIRouter(prefix="/api/v1/incidents", dependencies=[Depends(require_api_token)])


def _parse_labels(values: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                                detail=f"label filter {item!r} must look like name=value")
        pairs.append((name, value))
    return tuple(pairs)


def _summary(hit: incident_store.Hit) -> IncidentSummary:
    incident, digest = hit.incident, hit.digest
    return IncidentSummary(
        id=incident.id, title=incident.title, status=incident.status, alertname=incident.alertname,
        created_at=incident.created_at, updated_at=incident.updated_at, resolved_at=incident.resolved_at,
        notification_count=incident.notification_count, investigation_status=hit.investigation_status,
        top_category=digest.top_category, top_confidence=digest.top_confidence,
        confirmed_category=digest.confirmed_category, breached=digest.breached, score=hit.score,
    )


def _unprocessable(message: str) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=message)


@router.get("", response_model=IncidentPage, summary="Search the incident history",
            description="Full-text `q` (every word must match) over titles, alert names, labels, annotations, "
                        "findings and hypotheses, with filters; `sort=relevance` (the default with `q`) or "
                        "`time` (newest first, the default without). Follow `next_cursor` for the next page.",
            responses={422: {"description": "an invalid parameter, named in `detail`"}})
def list_incidents(
    request: Request,
    q: Annotated[str | None, Query(max_length=500, description="free text; every word must match")] = None,
    status_: Annotated[Literal["firing", "resolved"] | None, Query(alias="status")] = None,
    alertname: Annotated[str | None, Query(max_length=255)] = None,
    label: Annotated[list[str], Query(description="name=value; repeat to AND several")] = [],  # noqa: B006
    signal: Annotated[list[str], Query(description="breached finding id, e.g. kv_cache_usage; repeat to AND")] = [],  # noqa: B006
    category: Annotated[str | None, Query(max_length=64, description="top-ranked root-cause category")] = None,
    confirmed: Annotated[bool | None, Query(description="whether an engineer confirmed the cause")] = None,
    confirmed_category: Annotated[str | None, Query(max_length=64)] = None,
    since: AwareDatetime | None = None,
    until: AwareDatetime | None = None,
    sort: Annotated[Literal["relevance", "time"] | None, Query(description="default: relevance with q")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(max_length=500, description="`next_cursor` of the previous page")] = None,
) -> IncidentPage:
    if since and until and since >= until:
        raise _unprocessable("since must be before until")
    if q is not None and not fts.words(q):
        raise _unprocessable("q has no searchable words (letters or digits)")
    order = sort or ("relevance" if q else "time")
    if order == "relevance" and not q:
        raise _unprocessable("sort=relevance needs a full-text query q")
    filters = incident_store.IncidentFilter(
        q=q, status=status_, alertname=alertname, labels=_parse_labels(label), since=since, until=until,
        signals=tuple(signal), category=category, confirmed=confirmed, confirmed_category=confirmed_category)
    after = decode_cursor(cursor, order, filters) if cursor else None
    with session_scope(request.app.state.settings.effective_database_url) as session:
        hits, more = incident_store.search(session, filters=filters, sort=order, limit=limit, after=after)
        total = incident_store.count(session, filters=filters, cap=TOTAL_CAP + 1)
        items = [_summary(hit) for hit in hits]
    next_cursor = encode_cursor(hits[-1], order, filters) if more else None
    return IncidentPage(items=items, total=min(total, TOTAL_CAP), total_exact=total <= TOTAL_CAP, limit=limit,
                        sort=order, next_cursor=next_cursor)


def incident_out(incident: Incident) -> IncidentOut:
    investigations = [InvestigationOut.from_row(inv) for inv in incident.investigations]
    return IncidentOut(
        id=incident.id, group_key=incident.group_key, title=incident.title, status=incident.status,
        alertname=incident.alertname, receiver=incident.receiver, group_labels=incident.group_labels,
        common_labels=incident.common_labels, common_annotations=incident.common_annotations,
        external_url=incident.external_url, created_at=incident.created_at, updated_at=incident.updated_at,
        resolved_at=incident.resolved_at, notification_count=incident.notification_count,
        alerts=[AlertOut.model_validate(a) for a in incident.alerts],
        investigations=investigations, investigation=investigations[-1] if investigations else None,
    )


@router.get("/{incident_id}", response_model=IncidentOut, summary="One incident with its evidence")
def get_incident(request: Request, incident_id: int) -> IncidentOut:
    with session_scope(request.app.state.settings.effective_database_url) as session:
        incident = incident_store.get(session, incident_id=incident_id)
        if incident is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"incident {incident_id} not found")
        return incident_out(incident)

