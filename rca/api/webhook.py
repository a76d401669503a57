"""`POST /api/v1/alertmanager`: validate, store durably, then enqueue, then answer.

Stores are batched (rca/api/batch.py): a webhook that arrives while the process's transactions are
busy is stored with the others waiting, in one transaction, and the investigations of a batch are
enqueued right after its commit, in the same thread. Each request is still answered only after
its own notification is committed and its investigation enqueued (or found unenqueueable: the
sweeper enqueues it later); when a batch fails for one notification's sake (a race for a new group,
a value the database refuses, a deadlock), its notifications are stored again one by one, so that
each gets the answer it would have got alone.

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
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError, IntegrityError
from starlette.exceptions import HTTPException as StarletteHTTPException

from rca import metrics
from rca.api import jsonbody
from rca.api.auth import require_webhook_token
from rca.api.batch import Batcher
from rca.api.database import refusal
from rca.api.errors import VALIDATION_ERROR, from_pydantic, unprocessable
from rca.api.schemas import AcceptedOut, ErrorOut
from rca.config import Settings
from rca.domain.hosts import Fleet
from rca.domain.status import SlackEvent
from rca.intake.limits import IntakeLimits
from rca.intake.schema import WebhookPayload
from rca.intake.service import IntakeResult, Notice, fleet_of, record_notification, record_notifications
from rca.jobs.dispatch import Dispatcher, enqueue_all
from rca.store.db import session_scope
from rca.store.errors import unreachable

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

# Transactions storing notifications at once in one server process, and how much one may carry.
# Two keep the database busy while the other's Python runs, well inside the engine's pool of 10
# connections (rca/store/db.py). A batch is bounded by notifications and by their alerts (a
# notification may carry RCA_WEBHOOK_MAX_ALERTS of them).
STORE_BATCHES = 2
BATCH_NOTIFICATIONS = 64
BATCH_ALERTS = 2000


@dataclass(frozen=True)
class Stored:
    """One notification committed, and whether its investigation reached the queue."""

    result: IntakeResult
    enqueued: bool


def _store(url: str, notice: Notice, owe_slack: bool, fleet: Fleet) -> IntakeResult:
    """One notification in a transaction of its own."""
    for attempt in (1, 2):
        try:
            with session_scope(url) as session:
                return record_notification(session, notice.payload, notice.raw, owe_slack=owe_slack, fleet=fleet)
        except IntegrityError:
            # Two notifications of a new group raced; the loser now finds the winner's incident.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _alone(url: str, notice: Notice, owe_slack: bool, fleet: Fleet) -> IntakeResult | Exception:
    try:
        return _store(url, notice, owe_slack, fleet)
    except Exception as exc:  # answered by the request it belongs to
        return exc


def _record(url: str, batch: Sequence[Notice], owe_slack: bool, fleet: Fleet) -> Sequence[IntakeResult | Exception]:
    """The batch in one transaction; one by one if that fails for one notification's sake."""
    if len(batch) > 1:
        try:
            with session_scope(url) as session:
                return record_notifications(session, batch, owe_slack=owe_slack, fleet=fleet)
        except DBAPIError as exc:
            if unreachable(exc):
                return [exc] * len(batch)
        except Exception:
            log.debug("a batch of %d notifications failed; storing them one by one", len(batch), exc_info=True)
    return [_alone(url, notice, owe_slack, fleet) for notice in batch]


def _store_batch(
    url: str, owe_slack: bool, fleet: Fleet, dispatcher: Dispatcher, batch: Sequence[Notice]
) -> list[Stored | Exception]:
    """Commit the batch, then enqueue its investigations and resolve notices (in this thread: a
    second hand-off per request cost more than the enqueue)."""
    outcomes: list[Stored | Exception] = []
    for result in _record(url, batch, owe_slack, fleet):
        if isinstance(result, Exception):
            outcomes.append(result)
            continue
        enqueued = enqueue_all(dispatcher, result.investigation_ids)
        if result.resolved_now and owe_slack:
            dispatcher.notify(result.incident_id, SlackEvent.RESOLVED)
        outcomes.append(Stored(result, enqueued))
    return outcomes


def make_batcher(settings: Settings, dispatcher: Dispatcher) -> Batcher[Notice, Stored]:
    """The process's batcher of notifications (made at start-up, with the dispatcher)."""
    run = partial(_store_batch, settings.effective_database_url, settings.slack_enabled, fleet_of(settings), dispatcher)
    return Batcher(
        run, STORE_BATCHES, BATCH_NOTIFICATIONS, BATCH_ALERTS, weight=lambda notice: len(notice.payload.alerts)
    )


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
        stored = await request.app.state.intake_batcher.submit(Notice(payload, raw))
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
    result = stored.result
    if result.created:
        metrics.INCIDENTS_OPENED.inc()
    return AcceptedOut(
        incident_id=result.incident_id,
        created=result.created,
        investigation_id=result.investigation_id,
        enqueued=stored.enqueued,
    )
