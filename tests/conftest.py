"""The fixtures every test may ask for: the real PostgreSQL (a fresh database per session, emptied
per test) and the embedded SQLite, a Redis database of the session's own, the app with a recording
dispatcher, a stub Prometheus and a real one with no series. Helpers live in tests/helpers/, fakes
of external boundaries in tests/fakes/."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rca.api.app import create_app
from rca.config import get_settings
from rca.store.db import migrate
from tests.fakes.prometheus import StubPrometheus
from tests.helpers.brokers import own_redis_db
from tests.helpers.databases import create_database, drop_database, truncate
from tests.helpers.service import RecordingDispatcher, make_settings


@pytest.fixture(scope="session", autouse=True)
def _hermetic_environment() -> Iterator[None]:
    """Settings come from each test, never from the developer's shell."""
    mp = pytest.MonkeyPatch()
    for name in list(os.environ):
        if name.startswith("RCA_"):
            mp.delenv(name)
    get_settings.cache_clear()
    yield
    mp.undo()
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for the whole session, dropped at the end."""
    url = create_database()
    try:
        migrate(url)
        yield url
    finally:
        drop_database(url)


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The embedded default: a migrated SQLite file."""
    url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'rca.db'}"
    migrate(url)
    return url


@pytest.fixture
def pg_db(pg_url: str) -> str:
    """The session's PostgreSQL database, emptied for this test."""
    truncate(pg_url)
    return pg_url


@pytest.fixture(params=["postgresql", "sqlite"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Each backend in turn, emptied for this test."""
    url = request.getfixturevalue("pg_url" if request.param == "postgresql" else "sqlite_url")
    truncate(url)
    return url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis database of our own for the Celery broker, flushed at the end of the session."""
    with own_redis_db() as url:
        yield url


@pytest.fixture
def recorder() -> RecordingDispatcher:
    return RecordingDispatcher()


@pytest.fixture
def intake_client(db_url: str, tmp_path: Path, recorder: RecordingDispatcher) -> Iterator[TestClient]:
    """The app on each backend, with a dispatcher that only records."""
    with TestClient(create_app(make_settings(db_url, tmp_path), dispatcher=recorder)) as client:
        yield client


@pytest.fixture(scope="session")
def prometheus() -> Iterator[StubPrometheus]:
    with StubPrometheus() as stub:
        yield stub


@pytest.fixture(scope="session")
def empty_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus (Debian's) with no serving series (it scrapes a closed port): its own
    error answers, and a fleet with nothing in it. Its URL."""
    from tests.e2e import promstack

    promstack.require_binaries()
    process, url = promstack.start_prometheus(tmp_path_factory.mktemp("empty-prometheus"), promstack.free_port(), None)
    try:
        yield url
    finally:
        process.stop()
