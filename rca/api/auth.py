"""Bearer (and, for the webhook, basic) authentication with constant-time comparison."""

from __future__ import annotations

import base64
import binascii
import hmac

from fastapi import HTTPException, Request, status

from rca.config import Settings


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


def require_webhook_token(request: Request) -> None:
    settings: Settings = request.app.state.settings
    if settings.webhook_allow_unauthenticated:
        return
    token = settings.webhook_token.get_secret_value() if settings.webhook_token else None
    presented = _presented_secrets(request, allow_basic=True)
    if not presented:
        raise _unauthorized("missing credentials: send 'Authorization: Bearer <RCA_WEBHOOK_TOKEN>'")
    if token is None or not _matches(presented, [token]):
        raise _unauthorized("invalid webhook token")


def require_api_token(request: Request) -> None:
    settings: Settings = request.app.state.settings
    if settings.api_allow_unauthenticated:
        return
    presented = _presented_secrets(request, allow_basic=False)
    if not presented:
        raise _unauthorized("missing credentials: send 'Authorization: Bearer <token from RCA_API_TOKENS>'")
    if not _matches(presented, [t.get_secret_value() for t in settings.api_tokens]):
        raise _unauthorized("invalid API token")
