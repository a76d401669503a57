"""Incident history API: search (`GET /api/v1/incidents`), one incident, similar incidents, feedback
and investigating an incident again."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response, status
from pydantic import AwareDatetime, BeforeValidator
from sqlalchemy.orm import Session

from rca.api.auth import Principal, require_api_token, require_read, require_write
from rca.api.deps import DatabaseSession
from rca.api.errors import refused_query, unprocessable
from rca.api.jsonbody import StrictJSONRoute
from rca.api.schemas import (
    AUTH_ERRORS,
    AlertOut,
    ErrorOut,
    EvidenceOut,
    EvidenceSeriesOut,
    FeedbackIn,
    FeedbackOut,
    FleetOut,
    IncidentOut,
    IncidentPage,
    IncidentSummary,
    InvestigationOut,
    InvestigationRequestedOut,
    SimilarIncident,
    SimilarPage,
    SlackDeliveryOut,
    Verdict,
)
from rca.api.storable import require_storable_query
from rca.config import Settings
from rca.diagnosis.ranking import taxonomy
from rca.domain.clock import iso_datetime
from rca.domain.status import SlackEvent
from rca.incidents import feedback as incident_feedback
from rca.incidents import notices as incident_notices
from rca.incidents.queue import investigate_again
from rca.intake.service import fleet_of
from rca.jobs.dispatch import Dispatcher, enqueue_all
from rca.queries import incidents as incident_queries
from rca.queries.errors import QueryError
from rca.queries.incidents import TOTAL_CAP
from rca.store import evidence as evidence_store
from rca.store import feedback as feedback_store
from rca.store import incidents as incident_store
from rca.store import similar as similar_store
from rca.store.db import session_scope
from rca.store.models import FeedbackRow, IncidentRow
from rca.store.rounds import latest_round

router = APIRouter(
    route_class=StrictJSONRoute,  # feedback's body: NaN, 1e999, deep nesting, bad UTF-8 are 422s at their field
    prefix="/api/v1/incidents",
    dependencies=[Depends(require_read), Depends(require_storable_query)],
    responses=AUTH_ERRORS,
)


@router.get(
    "",
    response_model=IncidentPage,
    summary="Search the incident history",
    description="Full-text `q` (every word must match) over titles, alert names, labels, annotations, "
    "findings and hypotheses, with filters; `sort=relevance` (the default with `q`) or "
    "`time` (newest first, the default without). Follow `next_cursor` for the next page.",
)
def list_incidents(
    session: DatabaseSession,
    q: Annotated[str | None, Query(max_length=500, description="free text; every word must match")] = None,
    status_: Annotated[Literal["firing", "resolved"] | None, Query(alias="status")] = None,
    alertname: Annotated[str | None, Query(max_length=255)] = None,
    label: Annotated[list[str], Query(description="name=value; repeat to AND several")] = [],  # noqa: B006
    signal: Annotated[list[str], Query(description="breached finding id, e.g. kv_cache_usage; repeat to AND")] = [],  # noqa: B006
    category: Annotated[str | None, Query(max_length=64, description="top-ranked root-cause category")] = None,
    confirmed: Annotated[bool | None, Query(description="whether an engineer confirmed the cause")] = None,
    confirmed_category: Annotated[str | None, Query(max_length=64)] = None,
    origin: Annotated[
        Literal["alertmanager", "early_warning", "backtest"] | None,
        Query(
            description="who opened it: an Alertmanager alert, the fleet scan's early warning, or a "
            "warning the scan's replay over history stored (`rca backtest --store`)"
        ),
    ] = None,
    since: Annotated[AwareDatetime | None, BeforeValidator(iso_datetime)] = None,
    until: Annotated[AwareDatetime | None, BeforeValidator(iso_datetime)] = None,
    sort: Annotated[Literal["relevance", "time"] | None, Query(description="default: relevance with q")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[
        str | None,
        Query(
            max_length=500,
            description="`next_cursor` of the previous page of the same search, as it came: any other "
            "text is refused with 422 `invalid_cursor`",
        ),
    ] = None,
    total: Annotated[
        bool,
        Query(
            description=f"count the matches (up to {TOTAL_CAP}) even when they fill more than "
            "one page; this can cost 100 ms or more at a million incidents"
        ),
    ] = False,
) -> IncidentPage:
    asked = incident_queries.Search(
        q=q,
        status=status_,
        alertname=alertname,
        labels=label,
        signals=signal,
        category=category,
        confirmed=confirmed,
        confirmed_category=confirmed_category,
        origin=origin,
        since=since,
        until=until,
        sort=sort,
        limit=limit,
        cursor=cursor,
        total=total,
    )
    try:
        return IncidentPage.of(incident_queries.search(session, asked))
    except QueryError as exc:
        raise refused_query(exc) from None


def incident_out(incident: IncidentRow) -> IncidentOut:
    investigations = [InvestigationOut.from_row(inv) for inv in incident.investigations]
    return IncidentOut(
        id=incident.id,
        group_key=incident.group_key,
        title=incident.title,
        status=incident.status,
        alertname=incident.alertname,
        receiver=incident.receiver,
        group_labels=incident.group_labels,
        common_labels=incident.common_labels,
        common_annotations=incident.common_annotations,
        external_url=incident.external_url,
        origin=incident.origin,
        created_at=incident.created_at,
        updated_at=incident.updated_at,
        resolved_at=incident.resolved_at,
        notification_count=incident.notification_count,
        alerts=[AlertOut.model_validate(a) for a in incident.alerts],
        investigations=investigations,
        investigation=investigations[-1] if investigations else None,
        fleet=FleetOut.of(fleet) if (fleet := latest_round(incident.investigations)) else None,
        slack=SlackDeliveryOut.model_validate(incident.slack_delivery) if incident.slack_delivery else None,
    )


IncidentId = Annotated[int, Path(ge=1, le=2**31 - 1)]


@router.get(
    "/{incident_id}",
    response_model=IncidentOut,
    summary="One incident with its evidence",
    responses={404: {"model": ErrorOut, "description": "no such incident"}},
)
def get_incident(session: DatabaseSession, incident_id: IncidentId) -> IncidentOut:
    incident = incident_store.get(session, incident_id=incident_id)
    if incident is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"incident {incident_id} not found")
    return incident_out(incident)


@router.get(
    "/{incident_id}/similar",
    response_model=SimilarPage,
    summary="Past incidents with the same evidence",
    description="Ranked by evidence signature: breached findings, their onset order, the serving stack and "
    "the top causes; each with the cause an engineer confirmed, when known.",
    responses={404: {"model": ErrorOut, "description": "no such incident"}},
)
def similar_incidents(
    session: DatabaseSession, incident_id: IncidentId, limit: Annotated[int, Query(ge=1, le=50)] = 10
) -> SimilarPage:
    signature = similar_store.signature(session, incident_id)
    if signature is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"incident {incident_id} not found")
    matches = similar_store.find(session, signature, limit)
    items = [
        SimilarIncident(
            incident=IncidentSummary.of(m.hit),
            score=m.score,
            shared_breached=m.shared,
            onset_order=m.signature.onset_order,
            stack=m.signature.stack,
            confirmed_category=m.signature.confirmed_category,
        )
        for m in matches
    ]
    return SimilarPage(
        incident_id=incident_id,
        breached=signature.breached,
        onset_order=signature.onset_order,
        stack=signature.stack,
        categories=signature.categories,
        items=items,
    )


@router.get(
    "/{incident_id}/evidence",
    response_model=EvidenceOut,
    summary="The series kept as evidence",
    description="Each finding's series as the investigation kept it (downsampled, with its step, labels and "
    "baseline period): what the incident page draws, readable after Prometheus has dropped the data. "
    "The thresholds, onsets and baselines are the findings' (`GET /api/v1/incidents/{id}`).",
    responses={404: {"model": ErrorOut, "description": "no such incident, or the investigation is not one of its"}},
)
def incident_evidence(
    session: DatabaseSession,
    incident_id: IncidentId,
    investigation: Annotated[
        int | None,
        Query(ge=1, le=2**31 - 1, description="an investigation id of this incident; default: its latest finished one"),
    ] = None,
) -> EvidenceOut:
    if session.get(IncidentRow, incident_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"incident {incident_id} not found")
    chosen = evidence_store.investigation_of(session, incident_id, investigation)
    if chosen is None and investigation is not None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, detail=f"investigation {investigation} is not one of incident {incident_id}'s"
        )
    kept = evidence_store.load(session, chosen) if chosen is not None else {}
    return EvidenceOut(
        incident_id=incident_id,
        investigation_id=chosen,
        series=[
            EvidenceSeriesOut(
                finding=s.key,
                labels=s.labels,
                start=s.start,
                step_seconds=s.step_seconds,
                values=s.values,
                baseline_end=s.baseline_end,
            )
            for s in kept.values()
        ],
    )


def feedback_out(row: FeedbackRow) -> FeedbackOut:
    return FeedbackOut(
        id=row.id,
        incident_id=row.incident_id,
        investigation_id=row.investigation_id,
        category=row.category,
        note=row.note,
        hypotheses=[Verdict(**v) for v in row.verdicts],
        author=row.author,
        created_at=row.created_at,
    )


def record_feedback(
    session: Session, incident_id: int, body: FeedbackIn, author: str, shown: int | None = None, slack: bool = False
) -> FeedbackRow:
    """The request's verdict handed to the incidents room, judged against the taxonomy (the API,
    the pages' form and Slack's buttons all record through it); `FeedbackError` when the room
    refuses it. `shown`, `slack`: a Slack message's, judged against the investigation it showed and
    shown on it (rca/incidents/feedback.py)."""
    return incident_feedback.record(
        session,
        incident_id,
        category=body.category,
        note=body.note,
        verdicts=[verdict.model_dump() for verdict in body.hypotheses],
        author=author,
        categories=list(taxonomy()),
        shown=shown,
        owe_slack=slack,
    )


@router.post(
    "/{incident_id}/feedback",
    response_model=FeedbackOut,
    status_code=status.HTTP_201_CREATED,
    summary="Confirm or correct the root cause",
    dependencies=[Depends(require_write)],
    description="Needs a token with the write scope. The newest feedback of an incident is its confirmed "
    "cause; earlier ones stay as history.",
    responses={
        404: {"model": ErrorOut, "description": "no such incident"},
        408: {"model": ErrorOut, "description": "the body did not arrive within RCA_REQUEST_BODY_TIMEOUT_SECONDS"},
        413: {"model": ErrorOut, "description": "body over RCA_WEBHOOK_MAX_BODY_BYTES, or over a database limit"},
    },
)
def post_feedback(
    session: DatabaseSession,
    incident_id: IncidentId,
    body: FeedbackIn,
    principal: Annotated[Principal, Depends(require_api_token)],
) -> FeedbackOut:
    if session.get(IncidentRow, incident_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"incident {incident_id} not found")
    try:
        row = record_feedback(session, incident_id, body, principal.name)
    except incident_feedback.FeedbackError as exc:
        raise unprocessable(("body", exc.field), str(exc), exc.code) from None
    session.flush()
    return feedback_out(row)


@router.get(
    "/{incident_id}/feedback",
    response_model=list[FeedbackOut],
    summary="Feedback given, oldest first",
    responses={404: {"model": ErrorOut, "description": "no such incident"}},
)
def list_feedback(session: DatabaseSession, incident_id: IncidentId) -> list[FeedbackOut]:
    if session.get(IncidentRow, incident_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"incident {incident_id} not found")
    return [feedback_out(row) for row in feedback_store.history(session, incident_id)]


def request_investigation(
    settings: Settings, dispatcher: Dispatcher, incident_id: int, requested_by: str, slack: bool = False
) -> InvestigationRequestedOut | None:
    """Queue an investigation of the incident now (a fleet incident's whole round again, one per
    host), in a transaction of its own, and hand the new ones to the dispatcher once committed (as
    intake does); None when there is no such incident. A failed enqueue leaves it queued for the
    sweeper. `slack`: asked from the Slack message, which then says who asked (a notice owed, and
    queued after the commit)."""
    with session_scope(settings.effective_database_url) as session:
        requested = investigate_again(session, incident_id, requested_by=requested_by, fleet=fleet_of(settings))
        if requested is not None and requested.created and slack:
            incident_notices.owe(session, incident_id)
    if requested is None:
        return None
    enqueued = enqueue_all(dispatcher, requested.ids)
    if requested.created and slack:
        dispatcher.notify(incident_id, SlackEvent.ACTION)
    return InvestigationRequestedOut(
        incident_id=incident_id,
        investigation_id=requested.investigation_id,
        status=requested.status,
        created=requested.created,
        requested_by=requested.requested_by,
        enqueued=enqueued,
    )


@router.post(
    "/{incident_id}/investigations",
    response_model=InvestigationRequestedOut,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Investigate the incident again, now",
    dependencies=[Depends(require_write)],
    description="Needs a token with the write scope. Queues a new investigation of the incident, firing or "
    "resolved (reason `requested`, `requested_by` the token's name), beside the earlier ones; it becomes "
    "the incident's `investigation` (`GET /api/v1/incidents/{id}` shows it run to its end). "
    "202: queued now. 200: one was already queued or running, and it answers instead of another "
    "piling up (`created` false); the request is safe to repeat.",
    responses={
        200: {"model": InvestigationRequestedOut, "description": "one already queued or running answers"},
        202: {"description": "a new investigation is queued"},
        404: {"model": ErrorOut, "description": "no such incident"},
    },
)
def post_investigation(
    request: Request,
    response: Response,
    incident_id: IncidentId,
    principal: Annotated[Principal, Depends(require_api_token)],
) -> InvestigationRequestedOut:
    answer = request_investigation(
        request.app.state.settings, request.app.state.dispatcher, incident_id, principal.name
    )
    if answer is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"incident {incident_id} not found")
    if not answer.created:
        response.status_code = status.HTTP_200_OK
    return answer
