"""One shape for every 422: FastAPI's `{"detail": [{"loc", "msg", "type"}]}`, also for the checks the
service makes itself (webhook payloads, search parameters, cursors, feedback, times), so a client
and the OpenAPI document see one error format wherever a request is refused as unprocessable."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError

from rca.queries.errors import QueryError

Loc = tuple[str | int, ...]
MAX_ERRORS = 20  # a payload with thousands of bad alerts answers with the first ones


class FieldError(BaseModel):
    """One thing wrong with a request."""

    model_config = ConfigDict(extra="forbid")  # the schema says exactly these keys

    loc: list[str | int] = Field(
        description='where: "body", "query" or "path", then the field path, '
        'e.g. ["body", "alerts", 0, "startsAt"] or ["query", "cursor"]'
    )
    msg: str = Field(description="what is wrong, for a person")
    type: str = Field(
        description="what kind of error, for a program (pydantic's error types, or the service's own "
        "such as invalid_cursor, unstorable_text, invalid_label_filter, limit_exceeded, json_too_deep)"
    )
    input: Any = Field(None, description="the value refused (FastAPI's own parameter and body checks)")
    ctx: dict[str, Any] | None = Field(None, description='details of the constraint, e.g. {"le": 200}')


class ValidationErrorOut(BaseModel):
    """Every 422 answer: the request's fields at fault."""

    detail: list[FieldError] = Field(min_length=1)


def unprocessable(loc: Loc, msg: str, type_: str = "value_error") -> RequestValidationError:
    """A 422 in the standard shape, raised from an endpoint or dependency (FastAPI's handler answers it)."""
    return RequestValidationError([{"loc": loc, "msg": msg, "type": type_}])


def refused_query(exc: QueryError) -> RequestValidationError:
    """A query the query layer refused (`rca.queries`), as a 422 at its query parameters."""
    return RequestValidationError(
        [{"loc": ("query", p.parameter), "msg": p.message, "type": p.kind} for p in exc.problems]
    )


def from_pydantic(exc: PydanticValidationError, prefix: Sequence[str | int]) -> RequestValidationError:
    """A model validated by hand (the webhook body) refused with the same shape as FastAPI's own checks.
    The refused input is left out: it can be most of a 1 MiB payload."""
    errors = [
        {"loc": (*prefix, *err["loc"]), "msg": err["msg"], "type": err["type"]}
        for err in exc.errors(include_url=False, include_input=False, include_context=False)[:MAX_ERRORS]
    ]
    return RequestValidationError(errors)


VALIDATION_ERROR: dict[int | str, dict[str, Any]] = {
    422: {
        "model": ValidationErrorOut,
        "description": "a parameter or the body is invalid: each field at fault in `detail`",
    },
}


def _encodable(value: Any) -> Any:
    """`value` as strict JSON can carry it: a string with a lone surrogate (JSON's \\ud800, which
    the refused input or a field name may hold) is written as the escape it came as, NaN or an
    infinity (which json.loads accepts and a response may not hold) as its name, and bytes as UTF-8
    with what is not UTF-8 escaped."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, bytes):  # a body FastAPI did not read as JSON (another Content-Type) is echoed as bytes
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encodable(item) for item in value]
    return value


async def validation_failed(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's own 422 answer, except that it cannot fail to encode: its default handler echoes
    the refused input, and a lone surrogate or a NaN in it made the 422 itself a 500, as did a body sent
    with another Content-Type (echoed as bytes) that is not UTF-8."""
    return JSONResponse({"detail": _encodable(jsonable_encoder(_encodable(exc.errors())))}, status_code=422)
