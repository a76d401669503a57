"""`POST /api/v1/alertmanager`: validate, store durably, then enqueue, then answer.

Answers: 200 stored; 400 not JSON; 401 no or wrong token; 413 body over the limit; 422 not an
Alertmanager v4 payload; 503 database unavailable (Alertmanager retries 5xx). Nothing is stored
from a refused request.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from rca import metrics
from rca.api.auth import require_webhook_token
from rca.api.errors import VALIDATION_ERROR, from_pydantic, unprocessable
from rca.api.schemas import AcceptedOut, ErrorOut
from rca.api.storable import UNSTORABLE, problem
from rca.intake.schema import WebhookPayload
from rca.intake.service import IntakeResult, record_notification
from rca.store.db import session_scope

log = logging.getLogger(__name__)


class CountedRoute(APIRoute):
    """Counts every answer of the route in `rca_webhook_requests_total`, refusals by the auth
    dependency included (they are raised before the handler body runs)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def counted(request: Request) -> Response:
            try:
                response = await handler(request)
            except StarletteHTTPException as exc:
                metrics.webhook_answered(exc.status_code)
                raise
            except RequestValidationError:  # FastAPI's handler answers it 422 (rca.api.errors)
                metrics.webhook_answered(422)
                raise
            except Exception as exc:
                metrics.webhook_answered(503 if isinstance(exc, OperationalError) else 500)  # see app.py's handler
                raise
            metrics.webhook_answered(response.status_code)
            return response

        return counted


router = APIRouter(route_class=CountedRoute)


async def _read_limited(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE, detail=f"body of {declared} bytes exceeds the limit of {limit} bytes"
        )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, detail=f"body exceeds the limit of {limit} bytes")
    return bytes(body)


def _store(url: str, payload: WebhookPayload, raw: dict[str, Any]) -> IntakeResult:
    for attempt in (1, 2):
        try:
            with session_scope(url) as session:
                return record_notification(session, payload, raw)
        except IntegrityError:
            # Two notifications of a new group raced; the loser now finds the winner's incident.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


# The body is read and validated by hand (size limit first, then JSON, then the schema), so FastAPI
# cannot infer it; describe it from the same model. Nested models go to components (see app.py).
_BODY_SCHEMA = WebhookPayload.model_json_schema(ref_template="#/components/schemas/{model}")
BODY_DEFS: dict[str, Any] = _BODY_SCHEMA.pop("$defs", {})
_ERROR = {"model": ErrorOut}


@router.post(
    "/api/v1/alertmanager",
    response_model=AcceptedOut,
    dependencies=[Depends(require_webhook_token)],
    summary="Alertmanager webhook receiver (payload version 4)",
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": _BODY_SCHEMA}}}},
    responses={
        400: _ERROR | {"description": "body is not JSON"},
        401: _ERROR | {"description": "missing or invalid webhook token"},
        413: _ERROR | {"description": "body over RCA_WEBHOOK_MAX_BODY_BYTES"},
        422: VALIDATION_ERROR[422]
        | {"description": "not an Alertmanager version 4 payload: each field at fault in `detail`"},
        503: _ERROR | {"description": "database unavailable; nothing stored, retry later"},
    },
)
async def receive_alertmanager(request: Request) -> AcceptedOut:
    settings = request.app.state.settings
    body = await _read_limited(request, settings.webhook_max_body_bytes)
    try:
        raw = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail=f"body is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise unprocessable(("body",), "expected a JSON object: an Alertmanager version 4 payload", "dict_type")
    unstorable = problem(raw, ("body",))
    if unstorable:
        raise unprocessable(*unstorable, UNSTORABLE)
    try:
        payload = WebhookPayload.model_validate(raw)
    except ValidationError as exc:
        raise from_pydantic(exc, ("body",)) from None
    try:
        result = await run_in_threadpool(_store, settings.effective_database_url, payload, raw)
    except OperationalError as exc:
        log.error("database unavailable, refusing notification for %s: %s", payload.groupKey, exc.orig)
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE,
            detail="database unavailable; the notification was not stored, retry later",
            headers={"Retry-After": "10"},
        ) from None
    if result.created:
        metrics.INCIDENTS_OPENED.inc()
    enqueued = False
    if result.investigation_id is not None:
        enqueued = await run_in_threadpool(request.app.state.dispatcher.enqueue, result.investigation_id)
    if result.resolved_now and settings.slack_enabled:
        await run_in_threadpool(request.app.state.dispatcher.notify, result.incident_id, "resolved")
    return AcceptedOut(
        incident_id=result.incident_id,
        created=result.created,
        investigation_id=result.investigation_id,
        enqueued=enqueued,
    )
