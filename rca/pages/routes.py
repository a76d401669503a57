"""The pages: sign-in, the incident list, one incident, the accuracy figures, the feedback form and
the "Investigate again" button. The list searches through the query layer the API's search uses
(`rca.queries`), and the forms write through the API's own code (feedback, investigating again),
so a page shows exactly what the JSON API answers and accepts the same filters."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from rca.api import incidents as incident_api
from rca.api.auth import Principal, principal_for
from rca.api.schemas import AccuracyOut, FeedbackIn, IncidentPage, Verdict
from rca.config import Settings
from rca.diagnosis.ranking import taxonomy
from rca.domain import early_warning
from rca.domain.status import InvestigationStatus
from rca.pages import session as web_session
from rca.pages import views
from rca.pages.render import render, site_url
from rca.queries import incidents as incident_queries
from rca.queries.errors import QueryError
from rca.store import early_warnings
from rca.store import evidence as evidence_store
from rca.store import feedback as feedback_store
from rca.store import incidents as incident_store
from rca.store import similar as similar_store
from rca.store.db import session_scope

router = APIRouter(include_in_schema=False)
Viewer = Annotated[Principal, Depends(web_session.principal)]
IncidentId = Annotated[int, Path(ge=1, le=2**31 - 1)]
PAGE_SIZE = 25
MAX_FORM_BYTES = 16_384


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the last value of each), refused when it is something else."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, detail="send the page's form")
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, detail="form too large")
    try:
        fields = parse_qs(body.decode("utf-8"), max_num_fields=50, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail="the form is not valid text") from None
    return {name: values[-1] for name, values in fields.items()}


# --------------------------------------------------------------------------- sign-in


@router.get("/signin")
def signin_page(request: Request, next_path: Annotated[str, Query(alias="next")] = "/") -> Response:
    return render(request, "signin.html", {"next": web_session.safe_next(next_path), "error": None})


@router.post("/signin")
async def signin(request: Request) -> Response:
    form = await _form(request)
    web_session.check_csrf(request, form.get(web_session.CSRF_FIELD))
    destination = web_session.safe_next(form.get("next"))
    secret = form.get("token", "").strip()
    found = await run_in_threadpool(principal_for, _settings(request), secret) if secret else None
    if found is None:
        context = {"next": destination, "error": "That is not an API token of this service."}
        return render(request, "signin.html", context, status.HTTP_401_UNAUTHORIZED)
    response = RedirectResponse(site_url(request, destination), status.HTTP_303_SEE_OTHER)
    web_session.set_cookie(request, response, web_session.SESSION_COOKIE, secret)
    response.delete_cookie(web_session.NONCE_COOKIE, path="/")
    return response


@router.post("/signout")
async def signout(request: Request) -> Response:
    form = await _form(request)
    web_session.check_csrf(request, form.get(web_session.CSRF_FIELD))
    response = RedirectResponse(site_url(request, "/signin"), status.HTTP_303_SEE_OTHER)
    response.delete_cookie(web_session.SESSION_COOKIE, path="/")
    return response


# --------------------------------------------------------------------------- the list


def _blank_to_none(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None


@router.get("/")
def incident_list(
    request: Request,
    viewer: Viewer,
    q: str | None = None,
    status_: Annotated[str | None, Query(alias="status")] = None,
    alertname: str | None = None,
    label: str | None = None,
    signal: str | None = None,
    category: str | None = None,
    confirmed: str | None = None,
    confirmed_category: str | None = None,
    origin: str | None = None,
    cursor: str | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = PAGE_SIZE,
) -> Response:
    """The search form and one page of results; blank form fields mean no filter."""
    given = {
        "q": _blank_to_none(q),
        "status": _blank_to_none(status_),
        "alertname": _blank_to_none(alertname),
        "label": _blank_to_none(label),
        "signal": _blank_to_none(signal),
        "category": _blank_to_none(category),
        "confirmed": _blank_to_none(confirmed),
        "confirmed_category": _blank_to_none(confirmed_category),
        "origin": _blank_to_none(origin),
    }
    errors: list[str] = []
    page = None
    try:
        asked = incident_queries.search_of_form(given, limit=limit, cursor=_blank_to_none(cursor))
        with session_scope(_settings(request).effective_database_url) as session:
            page = IncidentPage.of(incident_queries.search(session, asked))
    except QueryError as exc:
        errors = exc.messages
    kept = {name: value for name, value in given.items() if value} | (
        {"limit": str(limit)} if limit != PAGE_SIZE else {}
    )
    next_url = f"?{urlencode(kept | {'cursor': page.next_cursor})}" if page and page.next_cursor else None
    context = {
        "viewer": viewer,
        "filters": given,
        "page": page,
        "errors": errors,
        "next_url": next_url,
        "categories": list(taxonomy()),
    }
    return render(request, "list.html", context)


# --------------------------------------------------------------------------- one incident


def _incident_context(settings: Settings, incident_id: int) -> dict[str, Any] | None:
    with session_scope(settings.effective_database_url) as session:
        row = incident_store.get(session, incident_id=incident_id)
        if row is None:
            return None
        incident = incident_api.incident_out(row)
        # The evidence of the latest done investigation stays while a newer one runs, or when a newer
        # one could not read the evidence; without one, the latest inconclusive says why.
        done, blind = (
            [i for i in incident.investigations if i.status == status]
            for status in (InvestigationStatus.DONE, InvestigationStatus.INCONCLUSIVE)
        )
        found = done or blind
        inv = found[-1] if found else incident.investigation
        series = evidence_store.load(session, inv.id) if inv else {}
        similar = (
            similar_store.find(session, signature, limit=5)
            if (signature := similar_store.signature(session, incident_id))
            else []
        )
        feedback = [incident_api.feedback_out(f) for f in feedback_store.history(session, incident_id)]
        transitions = (
            early_warnings.transitions(session, incident_id) if incident.origin in early_warning.SCANNED else []
        )
    findings = {f.id: f for f in inv.findings} if inv else {}
    latest = incident.investigation
    return {
        "incident": incident,
        "inv": inv,
        # A newer run that could not read the evidence, above the diagnosis it does not replace.
        "blind_since": latest if latest and inv and latest.id != inv.id and latest.inconclusive_reason else None,
        "hint": views.inconclusive_hint(inv.inconclusive_reason) if inv else None,
        "evidence": views.evidence(settings, inv, series) if inv else None,
        "findings": findings,
        "warning": views.warning_view(incident, transitions, findings),
        "timeline": views.timeline(incident, feedback, transitions),
        "similar": similar,
        "feedback": feedback,
        "confirmed": feedback[-1] if feedback else None,
        "alerts": [(alert, views.web_url(alert.generator_url)) for alert in incident.alerts],
        "alertmanager": views.web_url(incident.external_url),
        "categories": list(taxonomy()),
    }


@router.get("/incidents/{incident_id}")
def incident_page(request: Request, viewer: Viewer, incident_id: IncidentId) -> Response:
    context = _incident_context(_settings(request), incident_id)
    if context is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"Incident {incident_id} not found.")  # the error page
    return render(request, "incident.html", context | {"viewer": viewer, "error": None})


def _record_feedback(settings: Settings, incident_id: int, body: FeedbackIn, viewer: Principal) -> None:
    with session_scope(settings.effective_database_url) as session:
        incident_api.record_feedback(session, incident_id, body, viewer.name)


@router.post("/incidents/{incident_id}/feedback")
async def feedback(request: Request, viewer: Viewer, incident_id: IncidentId) -> Response:
    """Confirm or correct the cause: the chosen category is the confirmed one, and each ranked
    hypothesis is judged right exactly when it named that category."""
    form = await _form(request)
    web_session.check_csrf(request, form.get(web_session.CSRF_FIELD))
    web_session.require_scope(viewer, "write")
    settings = _settings(request)
    context = await run_in_threadpool(_incident_context, settings, incident_id)
    if context is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"incident {incident_id} not found")
    chosen = form.get("category", "")
    ranked = context["inv"].hypotheses if context["inv"] else []
    try:
        body = FeedbackIn(
            category=chosen,
            note=form.get("note", ""),
            hypotheses=[Verdict(rank=h.rank, correct=h.category == chosen) for h in ranked],
        )
        await run_in_threadpool(_record_feedback, settings, incident_id, body, viewer)
    except ValueError as exc:  # the form's fields refused (pydantic's), or the room's FeedbackError
        page = context | {"viewer": viewer, "error": str(exc)}
        return render(request, "incident.html", page, status.HTTP_422_UNPROCESSABLE_CONTENT)
    return RedirectResponse(site_url(request, f"/incidents/{incident_id}#feedback"), status.HTTP_303_SEE_OTHER)


@router.post("/incidents/{incident_id}/investigations")
async def investigate_again(request: Request, viewer: Viewer, incident_id: IncidentId) -> Response:
    """The page's "Investigate again": queue a new investigation now (or find the one already queued
    or running), then show the incident, which names it."""
    form = await _form(request)
    web_session.check_csrf(request, form.get(web_session.CSRF_FIELD))
    web_session.require_scope(viewer, "write")
    answer = await run_in_threadpool(
        incident_api.request_investigation, _settings(request), request.app.state.dispatcher, incident_id, viewer.name
    )
    if answer is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"Incident {incident_id} not found.")
    return RedirectResponse(site_url(request, f"/incidents/{incident_id}#again"), status.HTTP_303_SEE_OTHER)


# --------------------------------------------------------------------------- accuracy


@router.get("/stats")
def stats_page(request: Request, viewer: Viewer) -> Response:
    with session_scope(_settings(request).effective_database_url) as session:
        figures = AccuracyOut.model_validate(feedback_store.accuracy(session))
    return render(request, "stats.html", {"viewer": viewer, "figures": figures})
