"""Bearer (and, for the webhook, basic) authentication with constant-time comparison."""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.http import HTTPBase
from starlette.requests import HTTPConnection

from rca.config import Settings
from rca.store import tokens
from rca.store.db import session_scope


def _presented_secrets(request: Request, allow_basic: bool) -> list[str]:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer" and value:
        return [value.strip()]
    if allow_basic and scheme.lower() == "basic" and value:
        try:
            user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return []
        # Alertmanager's basic_auth: accept the token as the password (or as the user if no password).
        return [password or user]
    return []


def _matches(presented: list[str], accepted: list[str]) -> bool:
    found = False
    for secret in presented:
        for token in accepted:
            # Compare against every token so timing does not reveal which one matched.
            found |= hmac.compare_digest(secret.encode(), token.encode())
    return found


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail=message, headers={"WWW-Authenticate": "Bearer"})


class _DeclaredOnly(HTTPBase):
    """An HTTP security scheme for the OpenAPI document only: FastAPI's own basic check would refuse a
    malformed header with its own 401 before ours, so the check itself is require_webhook_token."""

    async def __call__(self, request: HTTPConnection) -> None:
        return None


# The webhook accepts either (OpenAPI lists them as alternatives); both carry RCA_WEBHOOK_TOKEN.
webhook_bearer_scheme = _DeclaredOnly(
    scheme="bearer",
    scheme_name="WebhookBearer",
    description="RCA_WEBHOOK_TOKEN as `Authorization: Bearer <token>` (Alertmanager's `http_config.authorization`)",
)
webhook_basic_scheme = _DeclaredOnly(
    scheme="basic",
    scheme_name="WebhookBasic",
    description="Alertmanager's `http_config.basic_auth`: any user name and RCA_WEBHOOK_TOKEN as the password "
    "(or as the user name when the password is empty)",
)


async def require_webhook_token(
    request: Request,
    _bearer: Annotated[None, Depends(webhook_bearer_scheme)],
    _basic: Annotated[None, Depends(webhook_basic_scheme)],
) -> None:
    """RCA_WEBHOOK_TOKEN as a bearer token or a basic-auth password, unless webhooks are open."""
    settings: Settings = request.app.state.settings
    if settings.webhook_allow_unauthenticated:
        return
    token = settings.webhook_token.get_secret_value() if settings.webhook_token else None
    presented = _presented_secrets(request, allow_basic=True)
    if not presented:
        raise _unauthorized("missing credentials: send 'Authorization: Bearer <RCA_WEBHOOK_TOKEN>'")
    if token is None or not _matches(presented, [token]):
        raise _unauthorized("invalid webhook token")


@dataclass(frozen=True)
class Principal:
    """Who is calling the API: a token's name and what it may do."""

    name: str
    scopes: frozenset[str]


ALL_SCOPES = frozenset(tokens.SCOPES)


def _lookup_stored(url: str, secret: str) -> Principal | None:
    with session_scope(url) as session:
        row = tokens.lookup(session, secret)
        return Principal(row.name, frozenset(row.scopes)) if row else None


# Declares the bearer scheme in the OpenAPI document; the check itself is below (auto_error off so
# that our own 401 messages stay).
bearer_scheme = HTTPBearer(auto_error=False, description="a token from RCA_API_TOKENS or `rca token create`")


def require_api_token(
    request: Request, _declared: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]
) -> Principal:
    """A token from RCA_API_TOKENS (full access, named env-token-N by position) or one created
    with `rca token create` (its scopes)."""
    settings: Settings = request.app.state.settings
    if settings.api_allow_unauthenticated:
        return Principal("anonymous", ALL_SCOPES)
    presented = _presented_secrets(request, allow_basic=False)
    if not presented:
        raise _unauthorized("missing credentials: send 'Authorization: Bearer <API token>'")
    principal = principal_for(settings, presented[0])
    if principal is None:
        raise _unauthorized("invalid API token")
    return principal


def principal_for(settings: Settings, secret: str) -> Principal | None:
    """Whom an API token names, however it was presented (a header, the pages' session cookie);
    None when it is no token of this service."""
    configured = [t.get_secret_value() for t in settings.api_tokens]
    matched = [position for position, token in enumerate(configured, start=1) if _matches([secret], [token])]
    if matched:
        return Principal(f"env-token-{matched[0]}", ALL_SCOPES)
    return _lookup_stored(settings.effective_database_url, secret)


def _require(scope: str) -> Callable[[Principal], Principal]:
    def check(principal: Annotated[Principal, Depends(require_api_token)]) -> Principal:
        if scope not in principal.scopes:
            raise HTTPException(status.HTTP_403_FORBIDDEN, detail=f"token {principal.name!r} lacks the {scope!r} scope")
        return principal

    return check


require_read = _require("read")
require_write = _require("write")
