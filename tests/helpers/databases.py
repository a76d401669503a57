"""The real PostgreSQL the tests need (a database of their own per session, created and dropped
here) and the counts and rows they check. PostgreSQL is required: when it is absent the tests
that need it fail with a message saying so, they are never skipped. TEST_POSTGRES_ADMIN_URL names
a database we may connect to in order to create and drop others."""

from __future__ import annotations

import os
import uuid
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from sqlalchemy import func, select, text

from rca.store.db import get_engine
from rca.store.models import AlertRow, FindingRow, HypothesisRow, IncidentRow, InvestigationRow, NotificationRow

PG_ADMIN_URL = os.environ.get("TEST_POSTGRES_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/test")
CLOSED_PORT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:1/x"
# Children first, so that deleting on SQLite never trips a foreign key.
TABLES = ("evidence_series", "hypotheses", "findings", "notifications", "alerts", "investigations", "incidents")
SLACK_TABLES = ("slack_attempts", "slack_deliveries", "slack_sends")  # emptied too, before the incidents they point at
# Tables that hang off no incident and so survive a cascade from `incidents`.
STANDALONE_TABLES = ("api_tokens",)
MODELS = {
    "incidents": IncidentRow,
    "alerts": AlertRow,
    "notifications": NotificationRow,
    "investigations": InvestigationRow,
    "findings": FindingRow,
    "hypotheses": HypothesisRow,
}


def _admin_connect() -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        error = str(exc).strip()
    pytest.fail(
        f"PostgreSQL is required for these tests and is not reachable at {PG_ADMIN_URL}: {error}", pytrace=False
    )


def create_database() -> str:
    """Create an empty database with a random name; returns its SQLAlchemy URL."""
    name = f"rca_test_{uuid.uuid4().hex[:12]}"
    with _admin_connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    admin = urlsplit(PG_ADMIN_URL)
    return f"postgresql+psycopg://{admin.netloc}/{name}"


def drop_database(url: str) -> None:
    engine = get_engine(url)
    engine.dispose()
    name = url.rsplit("/", 1)[1]
    with _admin_connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def truncate(url: str) -> None:
    with get_engine(url).begin() as conn:
        tables = SLACK_TABLES + TABLES + STANDALONE_TABLES
        if url.startswith("postgresql"):
            conn.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        else:
            for table in tables:
                conn.execute(text(f"DELETE FROM {table}"))


def count_rows(url: str) -> dict[str, int]:
    with get_engine(url).connect() as conn:
        return {table: conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() for table in TABLES}


def scalar(url: str, query: Any) -> Any:
    with get_engine(url).connect() as conn:
        return conn.execute(query).scalar()


def rows(url: str, query: Any) -> list[Any]:
    with get_engine(url).connect() as conn:
        return list(conn.execute(query).all())


def investigation_rows(url: str) -> list[Any]:
    return rows(url, select(InvestigationRow.__table__).order_by(InvestigationRow.id))


def count_for(url: str, model: type, **where: Any) -> int:
    query = select(func.count()).select_from(model)
    for name, value in where.items():
        query = query.where(getattr(model, name) == value)
    return scalar(url, query)
