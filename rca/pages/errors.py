"""Errors as a browser sees them: a page route answers an error with an HTML page (the message
escaped like every page, never a stack trace), while the API, its docs, the probes and the assets
keep their own answers (JSON for the API, FastAPI's shape for a 422).

Whether a request is for a page is decided by its path, not its Accept header: everything outside
the paths the API app itself serves (`/api/...`, `/docs`, `/healthz`, the assets...) is the
pages' (a mistyped URL in the browser is a page 404; a script fetching a page with a bearer token
gets the same HTML a browser does)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import PlainTextResponse, Response
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Mount

from rca.api.database import database_error, refusal
from rca.api.errors import validation_failed
from rca.api.methods import http_error, with_allow
from rca.pages.render import render

log = logging.getLogger(__name__)

TITLES = {
    400: "Bad request",
    401: "Not signed in",
    403: "Not allowed",
    404: "Not found",
    405: "Not allowed here",
    408: "Too slow",
    413: "Too large",
    415: "Not a form",
    422: "Not understood",
    500: "Something went wrong",
    503: "Try again later",
}
INTERNAL = "The service failed to answer this page. The error is in its log; nothing about it is shown here."
API_PREFIX = "/api/"


class PageErrors:
    """The exception handlers of the site: HTML for page routes, the API's own answers elsewhere."""

    def __init__(self, app: FastAPI) -> None:
        """Take the paths the API app serves now, before the pages are added."""
        self.exact: set[str] = set()
        self.prefixes: list[str] = [API_PREFIX]
        for route in app.routes:
            path = getattr(route, "path", None)
            if isinstance(route, Mount) and path:
                self.prefixes.append(path.rstrip("/") + "/")
            elif path:
                self.exact.add(path)

    def is_page(self, request: Request) -> bool:
        path = str(request.scope.get("path", "/"))
        root = str(request.scope.get("root_path", "")).rstrip("/")
        if root and path.startswith(root + "/"):
            path = path[len(root) :]
        return path not in self.exact and not any(path.startswith(prefix) for prefix in self.prefixes)

    def install(self, app: FastAPI) -> None:
        app.add_exception_handler(StarletteHTTPException, self.http_error)  # type: ignore[arg-type]
        app.add_exception_handler(RequestValidationError, self.invalid)  # type: ignore[arg-type]
        app.add_exception_handler(DBAPIError, self.database)
        app.add_exception_handler(Exception, self.internal)

    async def http_error(self, request: Request, exc: StarletteHTTPException) -> Response:
        if not self.is_page(request):
            return await http_error(request, exc)
        exc = with_allow(request, exc)
        message = str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":  # no route: Starlette's own words
            message = f"There is no page at {request.url.path}."
        elif exc.status_code == 405 and message == "Method Not Allowed":
            message = f"{request.method} is not accepted at {request.url.path}."
        return error_page(request, exc.status_code, [message], exc.headers)

    async def invalid(self, request: Request, exc: RequestValidationError) -> Response:
        if not self.is_page(request):
            return await validation_failed(request, exc)
        return error_page(request, 422, [_field_error(error) for error in exc.errors()])

    async def database(self, request: Request, exc: Exception) -> Response:
        if not self.is_page(request):
            return await database_error(request, exc)
        assert isinstance(exc, DBAPIError)
        answer = refusal(exc, "the request", "The database is unavailable; try again in a moment.")
        if answer is None:
            raise exc  # a bug: the 500 page
        if isinstance(answer, RequestValidationError):
            return await self.invalid(request, answer)
        return error_page(request, answer.status_code, [str(answer.detail)], answer.headers)

    async def internal(self, request: Request, exc: Exception) -> Response:
        """The last resort (Starlette logs the exception and re-raises it after this answer)."""
        if not self.is_page(request):
            return PlainTextResponse("Internal Server Error", status_code=500)
        return error_page(request, 500, [INTERNAL])


def _field_error(error: Mapping[str, object]) -> str:
    loc = error.get("loc")
    where = ".".join(str(part) for part in loc[1:]) if isinstance(loc, list | tuple) and len(loc) > 1 else ""
    message = str(error.get("msg", "invalid"))
    return f"{where}: {message}" if where else message


def error_page(
    request: Request, status_code: int, messages: list[str], headers: Mapping[str, str] | None = None
) -> Response:
    """The error as a page of the site (its header, its links back), with the exception's headers
    (WWW-Authenticate, Retry-After, Connection: close)."""
    context = {"status": status_code, "title": TITLES.get(status_code, "Error"), "messages": messages}
    response = render(request, "error.html", context, status_code)
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response
