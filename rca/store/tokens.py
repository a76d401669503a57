"""Named API tokens with scopes. Only the SHA-256 of a token is stored: tokens are 256-bit
random secrets, so a fast hash is enough (no password stretching) and the hash can be looked up
through a unique index."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from rca.domain.clock import utcnow
from rca.store.models import ApiTokenRow

SCOPES = ("read", "write")
PREFIX = "rca_"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create(session: Session, name: str, scope: str) -> str:
    """Store a new token and return it (the only time it is ever shown). `write` includes `read`."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    if session.scalar(select(ApiTokenRow.id).where(ApiTokenRow.name == name)) is not None:
        raise ValueError(f"a token named {name!r} already exists")
    token = PREFIX + secrets.token_urlsafe(32)
    scopes = ["read", "write"] if scope == "write" else ["read"]
    session.add(ApiTokenRow(name=name, token_hash=token_hash(token), scopes=scopes, created_at=utcnow()))
    return token


def lookup(session: Session, token: str) -> ApiTokenRow | None:
    """The live (not revoked) token with this secret, if any."""
    return session.scalar(
        select(ApiTokenRow).where(ApiTokenRow.token_hash == token_hash(token), ApiTokenRow.revoked_at.is_(None))
    )


def revoke(session: Session, name: str) -> bool:
    row = session.scalar(select(ApiTokenRow).where(ApiTokenRow.name == name, ApiTokenRow.revoked_at.is_(None)))
    if row is None:
        return False
    row.revoked_at = utcnow()
    return True
