"""`/docs` (Swagger UI) and `/redoc` (ReDoc) served from files vendored in the package, never a CDN,
so the API documentation works in an air-gapped cluster (static/vendor/README.md says what and why).

Both pages carry a Content-Security-Policy that allows only this origin: ReDoc 2's side menu shows a
logo from cdn.redoc.ly, which the policy stops (the menu then hides it), and a future bundle that
reached for the internet would fail the same way instead of leaking requests.

Like `/openapi.json`, these pages are public: they describe the API and hold no data or secret;
every operation they can call still needs its token.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
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


# Styles may be inline (both libraries set style attributes; ReDoc injects <style>); ReDoc's search
# runs in a worker it starts from a blob: URL; images are the favicon and data: icons.
_CSP = (
    "default-src 'none'; script-src 'self'{scripts}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; worker-src blob:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'self'"
)
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def _asset(root: str, package: str, name: str) -> str:
    return f"{root}{STATIC_PATH}/vendor/{VENDOR_MANIFEST[package]['dir']}/{name}"


def _same_origin_only(page: HTMLResponse) -> HTMLResponse:
    """Add the CSP, allowing the page's own inline script (Swagger UI's start-up) by its hash."""
    html = bytes(page.body).decode()
    hashes = "".join(
        f" 'sha256-{base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()}'"
        for script in _INLINE_SCRIPT.findall(html)
    )
    page.headers["Content-Security-Policy"] = _CSP.format(scripts=hashes)
    return page


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
        return _same_origin_only(
            get_swagger_ui_html(
                openapi_url=f"{base}{app.openapi_url}",
                title=f"{app.title} - Swagger UI",
                swagger_js_url=_asset(base, "swagger-ui-dist", "swagger-ui-bundle.js"),
                swagger_css_url=_asset(base, "swagger-ui-dist", "swagger-ui.css"),
                swagger_favicon_url=_asset(base, "swagger-ui-dist", "favicon-32x32.png"),
                oauth2_redirect_url=None,
                swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
            )
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        base = root(request)
        return _same_origin_only(
            get_redoc_html(
                openapi_url=f"{base}{app.openapi_url}",
                title=f"{app.title} - ReDoc",
                redoc_js_url=_asset(base, "redoc", "redoc.standalone.js"),
                redoc_favicon_url=_asset(base, "swagger-ui-dist", "favicon-32x32.png"),
                with_google_fonts=False,
            )
        )
