"""A request body decoded as JSON that the database can store and give back.

`json.loads` accepts more than RFC 8259 JSON, and some of what it accepts fails only later, at the
database or when the stored row is read: NaN and Infinity (JSONB refuses them), numbers that
overflow a double to inf (1e999), integers of any length (Python will not turn one of over 4,300
digits into text, so it could never be written), nesting as deep as the interpreter's stack (a
RecursionError near 1,000 levels; a document a little shallower was stored and then failed on
read), and text with NUL or a lone surrogate (rca/api/storable.py). Each is refused here as a 422
naming where it is. pydantic's JSON parser refuses some of these too, but lets 1e999 through as
inf and names NaN only as "expected value". The webhook decodes its body with `decode`; routes whose
body FastAPI validates use `StrictJSONRoute`, which decodes it the same way first.
"""

from __future__ import annotations

import email.message
import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from rca.api.errors import Loc, unprocessable
from rca.api.storable import UNSTORABLE
from rca.api.storable import problem as text_problem

MAX_DEPTH = 32  # objects and arrays within one another; Alertmanager's own payload nests 4 deep
MAX_INT_DIGITS = 308  # as large as a double can be; far below Python's 4,300-digit conversion limit
TOO_DEEP = "json_too_deep"
OUT_OF_RANGE = "number_out_of_range"
NOT_A_NUMBER = "not_a_json_number"


class _Refused:
    """Stands in for a number the decoder must not build, so the walk can say where it was."""

    def __init__(self, type_: str, msg: str) -> None:
        self.type, self.msg = type_, msg


def _constant(name: str) -> _Refused:
    return _Refused(NOT_A_NUMBER, f"{name} is not a JSON number (RFC 8259); send null or a string instead")


def _integer(digits: str) -> int | _Refused:
    length = len(digits.lstrip("-"))
    if length > MAX_INT_DIGITS:
        return _Refused(OUT_OF_RANGE, f"an integer of {length} digits is out of range (at most {MAX_INT_DIGITS})")
    return int(digits)


def _float(text: str) -> float | _Refused:
    value = float(text)
    if not math.isfinite(value):
        return _Refused(OUT_OF_RANGE, f"{text[:40]} is out of range: a number must be a finite double (|x| < 1.8e308)")
    return value


def problem(value: Any, loc: Loc, depth: int = 0) -> tuple[Loc, str, str] | None:
    """Where the decoded document holds something that cannot be stored, what, and its error type."""
    if isinstance(value, _Refused):
        return loc, value.msg, value.type
    if isinstance(value, str):
        found = text_problem(value, loc)
        return (*found, UNSTORABLE) if found else None
    if not isinstance(value, dict | list):
        return None
    if depth >= MAX_DEPTH:
        return loc, f"JSON nested deeper than {MAX_DEPTH} levels", TOO_DEEP
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        # A bad key is reported at the object that holds it.
        bad_key = text_problem(key, loc) if isinstance(key, str) else None
        if bad_key:
            return (*bad_key, UNSTORABLE)
        inner = problem(item, (*loc, key), depth + 1)
        if inner:
            return inner
    return None


class NotJSON(ValueError):
    """The body is not JSON (or not UTF-8, -16 or -32); `position` is the offending byte's or character's."""

    def __init__(self, message: str, position: int | None) -> None:
        super().__init__(message)
        self.position = position


def parse(body: bytes, loc: Loc = ("body",)) -> Any:
    """The body as JSON: NotJSON when it is not JSON at all, a 422 when it holds what cannot be stored."""
    try:
        document = json.loads(body, parse_constant=_constant, parse_int=_integer, parse_float=_float)
    except json.JSONDecodeError as exc:
        raise NotJSON(str(exc), exc.pos) from None
    except UnicodeDecodeError as exc:
        raise NotJSON(str(exc), exc.start) from None
    except RecursionError:
        raise unprocessable(loc, f"JSON nested deeper than {MAX_DEPTH} levels", TOO_DEEP) from None
    found = problem(document, loc)
    if found:
        raise unprocessable(*found)
    return document


def decode(body: bytes, loc: Loc = ("body",)) -> Any:
    """The webhook's body as JSON: 400 when it is not JSON at all, 422 when it holds what cannot be stored."""
    try:
        return parse(body, loc)
    except NotJSON as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail=f"body is not valid JSON: {exc}") from None


def _read_as_json(content_type: str | None) -> bool:
    """Whether FastAPI reads a body of this Content-Type as JSON (application/json or */*+json; with
    none, it does not: its strict_content_type)."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


class StrictJSONRoute(APIRoute):
    """A route whose JSON body FastAPI validates (a pydantic model) but `parse` decodes.

    FastAPI decodes with Starlette's `json.loads` and answers what that cannot finish (nesting past the
    interpreter's stack, an integer of 5,000 digits, bytes that are not UTF-8) with an undocumented
    400 "There was an error parsing the body" that names nothing, and lets NaN and 1e999 through to
    pydantic. Here each is a 422 at its field, as for the webhook, and text that is not JSON is
    FastAPI's own 422 `json_invalid`, with the position and the reason.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def strict(request: Request) -> Response:
            body = await request.body()  # the size and the time it may take: rca/api/body.py
            if body and _read_as_json(request.headers.get("content-type")):
                try:
                    document = parse(body)
                except NotJSON as exc:
                    raise RequestValidationError(
                        [
                            {
                                "type": "json_invalid",
                                "loc": ("body", exc.position) if exc.position is not None else ("body",),
                                "msg": f"JSON decode error: {exc}",
                            }
                        ]
                    ) from None
                # Starlette's Request.json() returns what it finds here instead of decoding again.
                request._json = document
            return await handler(request)

        return strict
