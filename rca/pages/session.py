"""Who is looking at a page, and the CSRF token of its forms.

An API token entered once on /signin becomes the `rca_session` cookie: HttpOnly (no script reads
it), SameSite=Strict (no other site's link or form sends it), Secure when the request came over
https. The cookie is checked like a bearer token on every request, so a revoked token signs its
sessions out at once. Scripts may send `Authorization: Bearer` instead. The token never appears in
a URL or a page: forms carry a CSRF token derived from it (HMAC), or, before sign-in and when the
pages are open (RCA_API_ALLOW_UNAUTHENTICATED), a random nonce also held in a cookie.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import quote

from fastapi import HTTPException, Request, Response, status

from rca.api.auth import ALL_SCOPES, Principal, principal_for, require_api_token
from rca.config import Settings

SESSION_COOKIE = "rca_session"
NONCE_COOKIE = "rca_csrf"
CSRF_FIELD = "csrf_token"


class SignInRequired(Exception):
    """A browser without a session asked for a page: it is sent to /signin, then back to `next`."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def principal(request: Request) -> Principal:
    """The viewer: anonymous with every scope when the API is open, the bearer token's owner, or
    the session cookie's; a browser with neither is sent to sign in."""
    settings = _settings(request)
    if settings.api_allow_unauthenticated:
        return Principal("anonymous", ALL_SCOPES)
    if request.headers.get("authorization"):
        found: Principal | None = require_api_token(request, None)  # a wrong token is a 401, as on the API
    else:
        secret = request.cookies.get(SESSION_COOKIE)
        found = principal_for(settings, secret) if secret else None
    if found is None:
        destination = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInRequired(destination)
    require_scope(found, "read")
    return found


def require_scope(viewer: Principal, scope: str) -> None:
    if scope not in viewer.scopes:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=f"token {viewer.name!r} lacks the {scope!r} scope")


def csrf_token(request: Request, response: Response | None = None) -> str:
    """The token this viewer's forms carry: an HMAC of the session's secret, else a nonce kept in a
    cookie (set on `response` when the browser has none yet)."""
    secret = request.cookies.get(SESSION_COOKIE)
    if secret and not _settings(request).api_allow_unauthenticated:
        return hmac.new(secret.encode(), b"rca-pages-csrf", hashlib.sha256).hexdigest()
    nonce = request.cookies.get(NONCE_COOKIE) or getattr(request.state, "csrf_nonce", None)
    if nonce is None:
        nonce = secrets.token_urlsafe(32)
        request.state.csrf_nonce = nonce
    if response is not None and request.cookies.get(NONCE_COOKIE) != nonce:
        set_cookie(request, response, NONCE_COOKIE, nonce)
    return nonce


def check_csrf(request: Request, presented: str | None) -> None:
    """Refuse a form post whose CSRF token is not this viewer's. A bearer-token request carries
    no ambient credential (a browser never adds the header by itself) and needs none."""
    if request.headers.get("authorization") and not _settings(request).api_allow_unauthenticated:
        return
    expected = csrf_token(request)
    if not presented or not hmac.compare_digest(presented.encode(), expected.encode()):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, detail="the form's CSRF token is missing or stale; reload the page"
        )


def set_cookie(request: Request, response: Response, name: str, value: str) -> None:
    """A session cookie (gone when the browser closes) only this site's own pages send and no script reads."""
    response.set_cookie(name, value, httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/")


def safe_next(path: str | None) -> str:
    """Where to go after sign-in: a path on this site only (never `//host` or a URL)."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return quote(path, safe="/?=&%-_.~+,;:@!$'()*")
