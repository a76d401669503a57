"""`POST /api/v1/alertmanager`: validate, store durably, then enqueue, then answer.

Answers: 200 stored; 400 not JSON; 401 no or wrong token; 408 body too slow; 413 body over the
limit (or over a database limit); 422 not an Alertmanager v4 payload, or over a webhook limit, or
JSON the database cannot store; 503 database unavailable (Alertmanager retries 5xx, and only that
is worth retrying). Nothing is stored from a refused request. Every size is checked before the
work that grows with it: the body's (rca/api/body.py) before it is read, the JSON's depth and
numbers while it is decoded (rca/api/jsonbody.py), counts and lengths before the alerts are
validated (rca/intake/schema.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
from fastapi import APIRouter, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError, IntegrityError
from starlette.exceptions import HTTPException as StarletteHTTPException

from rca import metrics
from rca.api import jsonbody
from rca.api.auth import require_webhook_token
from rca.api.database import refusal
from rca.api.errors import VALIDATION_ERROR, from_pydantic, unprocessable
from rca.api.schemas import AcceptedOut, ErrorOut
from rca.config import TargetConfig
from rca.intake.limits import IntakeLimits
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
            except Exception:
                metrics.webhook_answered(500)  # database errors are answered in the handler (rca/api/database.py)
                raise
            metrics.webhook_answered(response.status_code)
            return response

        return counted


router = APIRouter(route_class=CountedRoute)

# Notifications stored at once by one server process. The engine's pool keeps 10 connections
# (rca/store/db.py); a store beyond them would open an overflow connection, a new Postgres backend,
# and close it again, which under a storm costs more than the wait for a pooled one.
STORE_CONCURRENCY = 10


def store_limiter(request: Request) -> anyio.CapacityLimiter:
    """The process's limiter of concurrent stores, made on first use (in the event loop)."""
    state = request.app.state
    if getattr(state, "store_limiter", None) is None:
        state.store_limiter = anyio.CapacityLimiter(STORE_CONCURRENCY)
    limiter: anyio.CapacityLimiter = state.store_limiter
    return limiter


def _store(
    url: str, payload: WebhookPayload, raw: dict[str, Any], owe_slack: bool, target: TargetConfig
) -> IntakeResult:
    for attempt in (1, 2):
        try:
            with session_scope(url) as session:
                return record_notification(session, payload, raw, owe_slack=owe_slack, target=target)
        except IntegrityError:
            # Two notifications of a new group raced; the loser now finds the winner's incident.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _shown(group_key: str, width: int = 120) -> str:
    """A group key for the log: a refused one can be 100 KB."""
    return group_key if len(group_key) <= width else f"{group_key[:width]}… ({len(group_key)} characters)"


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
        408: _ERROR | {"description": "the body did not arrive within RCA_REQUEST_BODY_TIMEOUT_SECONDS"},
        413: _ERROR
        | {"description": "body over RCA_WEBHOOK_MAX_BODY_BYTES, or a value over a database limit; nothing stored"},
        422: VALIDATION_ERROR[422]
        | {
            "description": "not an Alertmanager version 4 payload, over a webhook limit (RCA_WEBHOOK_MAX_*), or JSON "
            "the database cannot store (NaN, 1e999, nesting over 32 levels, NUL): each field at fault in `detail`"
        },
        503: _ERROR | {"description": "database unavailable; nothing stored, retry later"},
    },
)
async def receive_alertmanager(request: Request) -> AcceptedOut:
    settings = request.app.state.settings
    raw = jsonbody.decode(await request.body())  # the size and the time it may take: rca/api/body.py
    if not isinstance(raw, dict):
        raise unprocessable(("body",), "expected a JSON object: an Alertmanager version 4 payload", "dict_type")
    try:
        payload = WebhookPayload.model_validate(raw, context=IntakeLimits.from_settings(settings).context())
    except ValidationError as exc:
        raise from_pydantic(exc, ("body",)) from None
    try:
        result = await anyio.to_thread.run_sync(
            _store,
            settings.effective_database_url,
            payload,
            raw,
            settings.slack_enabled,
            settings.file_config().target,
            limiter=store_limiter(request),
        )
    except DBAPIError as exc:
        answer = refusal(
            exc,
            "the notification",
            "database unavailable; the notification was not stored, retry later",
            about=f"for group {_shown(payload.groupKey)}",
        )
        if answer is None:
            raise
        raise answer from None
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
