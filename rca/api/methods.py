"""A 405 names every method the path accepts. Starlette answers a request whose path matches and
whose method does not with the `Allow` header of the first route it tried, so a path served by
two routes (`GET` and `POST …/feedback`) was answered `Allow: POST`, hiding `GET` (RFC 9110
§15.5.6: the header lists the methods the target resource supports). The API's own document
(`/openapi.json`) lists every operation of each path, so the header is read from it."""

from __future__ import annotations

import re
from functools import cache

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from starlette.exceptions import HTTPException
from starlette.responses import Response

_PARAMETER = re.compile(r"\\\{[^}]*\\\}")  # an escaped `{name}` of a path template


@cache
def _paths(app: FastAPI) -> list[tuple[re.Pattern[str], str]]:
    """Each documented path as a pattern, with its methods as an `Allow` value (HEAD with GET, as
    Starlette serves it)."""
    found = []
    for template, operations in app.openapi()["paths"].items():
        methods = {method.upper() for method in operations}
        methods |= {"HEAD"} if "GET" in methods else set()
        found.append((re.compile("^" + _PARAMETER.sub("[^/]+", re.escape(template)) + "$"), ", ".join(sorted(methods))))
    return found


def with_allow(request: Request, exc: HTTPException) -> HTTPException:
    """The exception itself, or for a 405 on a documented path the same with the path's whole `Allow`."""
    if exc.status_code != 405:
        return exc
    path = request.url.path.removeprefix(str(request.scope.get("root_path", "")).rstrip("/"))
    allow = next((methods for pattern, methods in _paths(request.app) if pattern.match(path)), None)
    return exc if allow is None else HTTPException(405, exc.detail, {**(exc.headers or {}), "Allow": allow})


async def http_error(request: Request, exc: HTTPException) -> Response:
    """FastAPI's answer to an HTTP error, a 405's with every method the path accepts."""
    return await http_exception_handler(request, with_allow(request, exc))
