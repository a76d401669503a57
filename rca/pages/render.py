"""Rendering a page: the Jinja2 environment (autoescaped, templates in the package), the filters
the templates use, and the headers every page carries."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from rca.domain.coverage import could_not_investigate
from rca.domain.values import format_value
from rca.pages import session as web_session

TEMPLATES = Path(__file__).parent / "templates"
STATIC_DIR = Path(__file__).parent / "static"
STATIC_PATH = "/assets"
UPLOT = "vendor/uplot-1.6.32"  # static/vendor/README.md: version, integrity, hashes

# Scripts and styles from this origin only (no inline script: chart data travels in JSON blocks,
# which are not run); forms post only here; no framing, no <base>.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # the search words and cursors stay on this site
    "Cache-Control": "no-store",  # incident data, per viewer
}


# A clock time the service writes into its text ("since 11:29 UTC"): the page shows it in the
# viewer's zone like every other time, and says "UTC" once, in the footer.
CLOCK = re.compile(r"\b([01]\d|2[0-3]):([0-5]\d) UTC\b")


def _utc(value: datetime | None) -> str:
    """A time as the server writes it (UTC, 24-hour; the footer says UTC once, the script shows the
    viewer's zone)."""
    return f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S}" if value else "-"


def tokens(text: str | None) -> Markup:
    """`text`, escaped, with each word that holds a hyphen (a host, a label) kept whole on its line
    ("gpu-node-7:8000", never "gpu-node-" then "7:8000"), unless it is wider than the line itself."""
    if not text:
        return Markup("")
    return Markup("").join(
        Markup('<span class="token">{}</span>').format(part) if "-" in part else escape(part)
        for part in re.split(r"(\s+)", text)
    )


def clock_times(text: str | None, near: datetime | None) -> Markup:
    """`text`, escaped, with each "HH:MM UTC" in it a <time> the script shows in the viewer's zone:
    the instant with that clock time nearest `near` (the text's own date is not written)."""
    if not text:
        return Markup("")
    if near is None:
        return escape(text)
    near = near.astimezone(UTC)
    parts: list[Markup] = []
    last = 0
    for match in CLOCK.finditer(text):
        parts.append(escape(text[last : match.start()]))
        day = near.replace(hour=int(match[1]), minute=int(match[2]), second=0, microsecond=0)
        at = min((day + timedelta(days=d) for d in (-1, 0, 1)), key=lambda t: abs(t - near))
        parts.append(Markup('<time datetime="{}" data-clock>{}</time>').format(at.isoformat(), f"{at:%H:%M}"))
        last = match.end()
    parts.append(escape(text[last:]))
    return Markup("").join(parts)


def _percent(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "-"


environment = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=True,  # every template: labels, annotations, span attributes and LLM text are untrusted
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
environment.filters["tokens"] = tokens
environment.filters["utc"] = _utc
environment.filters["fromtimestamp"] = lambda ts: datetime.fromtimestamp(ts, UTC)
environment.filters["clock"] = clock_times  # "since 11:29 UTC" in a finding's text
environment.filters["percent"] = _percent
environment.filters["value"] = format_value
environment.filters["could_not_investigate"] = could_not_investigate  # an inconclusive reason, in words


def site_url(request: Request, path: str) -> str:
    """`path` on this site, behind a proxy that strips a path prefix too."""
    return str(request.scope.get("root_path", "")).rstrip("/") + path


def render(request: Request, template: str, context: dict[str, Any], status_code: int = 200) -> HTMLResponse:
    """The page, with its forms' CSRF token and the site's root path, and the pages' headers."""
    response = HTMLResponse("", status_code=status_code, headers=HEADERS)
    page = context | {
        "root": site_url(request, ""),
        "assets": site_url(request, STATIC_PATH),
        "uplot": UPLOT,
        "csrf_token": web_session.csrf_token(request, response),
        "signed_in": web_session.SESSION_COOKIE in request.cookies,
    }
    response.body = response.render(environment.get_template(template).render(page))
    response.headers["content-length"] = str(len(response.body))
    return response
