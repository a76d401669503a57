"""Fixtures for end-to-end tests: a fresh Postgres database and a spare Redis db per session."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest

from tests.e2e import promstack
from tests.helpers.brokers import claim_redis_db

ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture(scope="session")
def e2e_database_url() -> Iterator[str]:
    """A throwaway Postgres database; fails loudly when Postgres is not running."""
    name = f"rca_e2e_{secrets.token_hex(4)}"
    with psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(ADMIN_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def e2e_broker_url() -> Iterator[str]:
    """A Redis database of its own, apart from the one the unit tests' worker consumes, so that
    neither worker takes the other's tasks (nor another test session's, running at the same time)."""
    url, client = claim_redis_db(pinned_offset=1)
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


@pytest.fixture(scope="session", autouse=True)
def _binaries() -> None:
    promstack.require_binaries()
