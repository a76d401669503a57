"""`/docs` (Swagger UI) and `/redoc` (ReDoc) served from files vendored in the package, never a CDN,
so the API documentation works in an air-gapped cluster (static/vendor/README.md says what and why).

Like `/openapi.json`, these pages are public: they describe the API and hold no data or secret;
every operation they can call still needs its token.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).parent / "static"
STATIC_PATH = "/static"
VENDOR_MANIFEST: dict[str, Any] = json.loads((STATIC_DIR / "vendor" / "VERSIONS.json").read_text())

# Swagger UI would otherwise show a badge image fetched from validator.swagger.io.
SWAGGER_UI_PARAMETERS: dict[str, Any] = {"validatorUrl": None}


def _asset(root: str, package: str, name: str) -> str:
    return f"{root}{STATIC_PATH}/vendor/{VENDOR_MANIFEST[package]['dir']}/{name}"


def install_docs(app: FastAPI) -> None:
    """Mount the vendored assets and add the two pages; build the app with docs_url=None, redoc_url=None."""
    app.mount(STATIC_PATH, StaticFiles(directory=STATIC_DIR), name="static")

    def root(request: Request) -> str:
        # Behind a proxy that strips a path prefix, every URL in the page must carry it (as FastAPI's own pages do).
        return str(request.scope.get("root_path", "")).rstrip("/")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        base = root(request)
        # No oauth2RedirectUrl: the API has no OAuth2 flow, only bearer tokens (and basic for the webhook).
        return get_swagger_ui_html(
            openapi_url=f"{base}{app.openapi_url}", title=f"{app.title} - Swagger UI",
            swagger_js_url=_asset(base, "swagger-ui-dist", "swagger-ui-bundle.js"),
            swagger_css_url=_asset(base, "swagger-ui-dist", "swagger-ui.css"),
            swagger_favicon_url=_asset(base, "swagger-ui-dist", "favicon-32x32.png"),
            oauth2_redirect_url=None, swagger_ui_parameters=SWAGGER_UI_PARAMETERS)

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        base = root(request)
        return get_redoc_html(
            openapi_url=f"{base}{app.openapi_url}", title=f"{app.title} - ReDoc",
            redoc_js_url=_asset(base, "redoc", "redoc.standalone.js"),
            redoc_favicon_url=_asset(base, "swagger-ui-dist", "favicon-32x32.png"),
            with_google_fonts=False)
