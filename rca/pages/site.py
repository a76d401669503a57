"""The service as `rca serve` runs it: the API (rca.api.app) plus these pages and their assets."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from rca.api.app import create_app
from rca.config import Settings
from rca.jobs.dispatch import Dispatcher
from rca.pages.errors import PageErrors
from rca.pages.render import STATIC_DIR, STATIC_PATH, site_url
from rca.pages.routes import router
from rca.pages.session import SignInRequired


async def _sign_in_first(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SignInRequired)
    query = f"?{urlencode({'next': exc.next_path})}" if exc.next_path != "/" else ""
    return RedirectResponse(site_url(request, f"/signin{query}"), status_code=303)


def install_pages(app: FastAPI) -> None:
    """Add the pages and their static files (uPlot, vendored: static/vendor/README.md) to the app."""
    app.mount(STATIC_PATH, StaticFiles(directory=STATIC_DIR), name="page-assets")
    errors = PageErrors(app)  # the paths that are not pages: the API's and the assets', before the pages join
    app.include_router(router)
    app.add_exception_handler(SignInRequired, _sign_in_first)
    errors.install(app)


def create_site(settings: Settings, dispatcher: Dispatcher | None = None) -> FastAPI:
    app = create_app(settings, dispatcher)
    install_pages(app)
    return app
