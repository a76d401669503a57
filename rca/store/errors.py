"""Which database errors mean "try again later" and which mean "this can never be stored".

A 503 tells Alertmanager (and any client) to retry, so it may mean only that the database is
unreachable or overloaded. Postgres refuses a value it will never accept with SQLSTATE class 22
(data exception: text too long for its column, a number out of range) or class 54 (program limit
exceeded: an index row over the btree limit, a tsvector over 1 MB). psycopg raises class 54 as an
`OperationalError`, the same class as a dropped connection, so the exception class alone cannot
tell the two apart; the SQLSTATE can.
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy.exc import DataError, DBAPIError, InterfaceError, OperationalError

DATA_EXCEPTION = "22"
PROGRAM_LIMIT_EXCEEDED = "54"
TRANSACTION_ROLLBACK = "40"


class Refusal(StrEnum):
    """Why the database did not store something."""

    UNAVAILABLE = "unavailable"  # unreachable, overloaded, shut down: the same request may succeed later
    TOO_LARGE = "too_large"  # over one of the database's size limits: never storable as it is
    INVALID = "invalid"  # a value the column refuses: never storable as it is
    OTHER = "other"  # a constraint or a bug: neither the client's fault nor worth retrying blindly


def sqlstate(exc: DBAPIError) -> str | None:
    """The SQLSTATE of the driver's error (psycopg), or None (SQLite, a connection that never opened)."""
    state = getattr(exc.orig, "sqlstate", None)
    return state if isinstance(state, str) else None


def classify(exc: DBAPIError) -> Refusal:
    """Unavailable only for what a retry can fix; a limit or a bad value is never retryable."""
    state = sqlstate(exc) or ""
    if state.startswith(PROGRAM_LIMIT_EXCEEDED):
        return Refusal.TOO_LARGE
    if state.startswith(DATA_EXCEPTION) or isinstance(exc, DataError):
        return Refusal.INVALID
    if exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError):
        return Refusal.UNAVAILABLE
    return Refusal.OTHER


def unreachable(exc: DBAPIError) -> bool:
    """The database failed whatever was asked of it (down, overloaded, connection lost), not one
    statement's data: a deadlock or serialization failure (SQLSTATE class 40) is one transaction's."""
    return classify(exc) is Refusal.UNAVAILABLE and not (sqlstate(exc) or "").startswith(TRANSACTION_ROLLBACK)


def first_line(exc: DBAPIError, limit: int = 200) -> str:
    """The driver's message, short enough to log: its first line, cut to `limit` characters
    (never the statement's parameters, which SQLAlchemy's own message includes)."""
    lines = str(exc.orig).strip().splitlines()
    text = lines[0] if lines else type(exc.orig).__name__
    return text if len(text) <= limit else text[:limit] + "…"
