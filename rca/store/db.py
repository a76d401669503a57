"""Engine and session factory, and the migration entry point (`rca migrate`)."""

from __future__ import annotations

import importlib.resources
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

# `rca_migrations` is a regular package on disk, so its Traversable is a filesystem path.
MIGRATIONS_DIR = Path(str(importlib.resources.files("rca_migrations")))


def _ensure_sqlite_dir(url: str) -> None:
    if url.startswith("sqlite"):
        path = make_url(url).database
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)


_ENGINES: dict[str, Engine] = {}


def get_engine(url: str) -> Engine:
    """One pooled engine per database URL and process."""
    if url not in _ENGINES:
        _ENGINES[url] = _create_engine(url)
    return _ENGINES[url]


def forget_engines_after_fork() -> None:
    """A forked child (a Celery pool process) must not reuse the parent's pooled connections."""
    for engine in _ENGINES.values():
        engine.dispose(close=False)


def _create_engine(url: str) -> Engine:
    """SQLite gets foreign keys, WAL and a busy timeout; Postgres a pre-ping pool."""
    _ensure_sqlite_dir(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.close()

        return engine
    # psycopg prepares a statement run five times on a connection, and Postgres may then plan it
    # once for any parameters. A search for a rare word and one for a word in every incident need
    # opposite plans (GIN bitmap vs. walking the time index), so every execution is planned with
    # its own values: a fraction of a millisecond against seconds for a wrong generic plan.
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=10,
        connect_args={"connect_timeout": 5, "options": "-c plan_cache_mode=force_custom_plan"},
    )


@lru_cache(maxsize=8)
def _session_factory(url: str) -> sessionmaker[Session]:
    return sessionmaker(get_engine(url), expire_on_commit=False)


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A transaction: commit on success, roll back on any error. The only place we commit."""
    session = _session_factory(url)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def ping(url: str) -> None:
    """Raise if the database cannot answer a trivial query."""
    with get_engine(url).connect() as conn:
        conn.execute(text("SELECT 1"))


def alembic_config(url: str) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(url: str, revision: str = "head") -> None:
    """Bring the schema to `revision` with Alembic (the only way tables are created)."""
    _ensure_sqlite_dir(url)
    command.upgrade(alembic_config(url), revision)
