"""Search API over incidents: `GET /api/v1/incidents` and `GET /api/v1/incidents/{id}`."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from pydantic import AwareDatetime

from rca.api.auth import require_api_token
from rca.api.schemas import AlertOut, IncidentOut, IncidentPage, IncidentSummary, InvestigationOut, SlackDeliveryOut
from rca.store import incidents as incident_store
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


def _summary(incident: Incident) -> IncidentSummary:
    latest = incident.investigations[-1] if incident.investigations else None
    top = latest.hypotheses[0] if latest and latest.hypotheses else None
    return IncidentSummary(
        id=incident.id, title=incident.title, status=incident.status, alertname=incident.alertname,
        created_at=incident.created_at, updated_at=incident.updated_at, resolved_at=incident.resolved_at,
        notification_count=incident.notification_count,
        investigation_status=latest.status if latest else None,
        top_category=top.category if top else None, top_confidence=top.confidence if top else None,
    )


@router.get("", response_model=IncidentPage, summary="Search incidents, newest first")
def list_incidents(
    request: Request,
    status_: Annotated[Literal["firing", "resolved"] | None, Query(alias="status")] = None,
    alertname: str | None = None,
    label: Annotated[list[str], Query(description="name=value; repeat to AND several")] = [],  # noqa: B006
    since: AwareDatetime | None = None,
    until: AwareDatetime | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> IncidentPage:
    if since and until and since >= until:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail="since must be before until")
    filters = incident_store.IncidentFilter(status=status_, alertname=alertname, labels=_parse_labels(label),
                                            since=since, until=until)
    with session_scope(request.app.state.settings.effective_database_url) as session:
        rows, total = incident_store.search(session, filters=filters, limit=limit, offset=offset)
        items = [_summary(row) for row in rows]
    next_offset = offset + limit if offset + limit < total else None
    return IncidentPage(items=items, total=total, limit=limit, offset=offset, next_offset=next_offset)


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
        slack=SlackDeliveryOut.model_validate(incident.slack_delivery) if incident.slack_delivery else None,
    )


@router.get("/{incident_id}", response_model=IncidentOut, summary="One incident with its evidence")
def get_incident(request: Request, incident_id: int) -> IncidentOut:
    with session_scope(request.app.state.settings.effective_database_url) as session:
        incident = incident_store.get(session, incident_id=incident_id)
        if incident is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"incident {incident_id} not found")
        return incident_out(incident)

