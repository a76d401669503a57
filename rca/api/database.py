"""How the API answers a database error: 503 only when the database is down.

Clients retry a 503 (Alertmanager does, forever), so it must mean only "unreachable, try again".
A request the database refuses for good (over a size limit, or a value its column cannot hold,
rca/store/errors.py) is the client's error: 413 or 422, and retrying it changes nothing. Anything
else is our bug and stays a 500.
"""

from __future__ import annotations

import logging

from fastapi import HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError

from rca.api.errors import unprocessable, validation_failed
from rca.store.errors import Refusal, classify, first_line

log = logging.getLogger(__name__)

UNSTORABLE_VALUE = "unstorable_value"
RETRY_AFTER = {"Retry-After": "10"}


def refusal(
    exc: DBAPIError, what: str, unavailable: str, about: str = ""
) -> HTTPException | RequestValidationError | None:
    """The answer to a database error while handling `what` ("the notification"), or None for a bug;
    `unavailable` is the 503's message, `about` what the log adds (which alert group)."""
    kind = classify(exc)
    reason = first_line(exc)
    logged = f"{what} {about}".strip()
    if kind is Refusal.UNAVAILABLE:
        log.error("database unavailable (%s): %s", logged, reason)
        return HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=unavailable, headers=RETRY_AFTER)
    if kind is Refusal.TOO_LARGE:
        log.warning("%s exceeds a database limit, refused: %s", logged, reason)
        return HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            detail=f"{what} exceeds a database limit ({reason}) and can never be stored as it is; nothing was stored",
        )
    if kind is Refusal.INVALID:
        log.warning("%s holds a value the database refuses: %s", logged, reason)
        return unprocessable(
            ("body",), f"a value the database cannot store ({reason}); nothing was stored", UNSTORABLE_VALUE
        )
    return None


async def database_error(request: Request, exc: Exception) -> JSONResponse:
    """App-wide handler of DBAPIError: the same answers for every route (feedback, search, ...)."""
    assert isinstance(exc, DBAPIError)
    answer = refusal(exc, "the request", "database unavailable, retry later")
    if answer is None:
        raise exc
    if isinstance(answer, RequestValidationError):
        return await validation_failed(request, answer)
    return JSONResponse({"detail": answer.detail}, status_code=answer.status_code, headers=answer.headers)
