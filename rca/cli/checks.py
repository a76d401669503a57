"""Start-up checks the serving commands share, each refusing in one line: auth settings, the
database's schema, a port to listen on; and the one warning when Prometheus cannot be read."""

from __future__ import annotations

import logging

from rca.cli.common import fail
from rca.config import Settings
from rca.startup import prometheus_problem

log = logging.getLogger("rca")


def check_auth_settings(settings: Settings) -> None:
    if not settings.webhook_token and not settings.webhook_allow_unauthenticated:
        fail("RCA_WEBHOOK_TOKEN: not set; set a token (or RCA_WEBHOOK_ALLOW_UNAUTHENTICATED=true to accept anyone)")
    if not settings.api_tokens and not settings.api_allow_unauthenticated:
        fail("RCA_API_TOKENS: not set; set comma-separated tokens (or RCA_API_ALLOW_UNAUTHENTICATED=true)")


def prepare_database(settings: Settings) -> None:
    """The embedded SQLite store migrates itself; a configured database must already be migrated."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from sqlalchemy.exc import OperationalError

    from rca.store.db import alembic_config, get_engine, migrate

    url = settings.effective_database_url
    if not settings.database_url:
        migrate(url)
        return
    try:
        with get_engine(url).connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
    except OperationalError as exc:
        fail(f"RCA_DATABASE_URL: cannot connect ({str(exc.orig).strip().splitlines()[0]}); is the database running?")
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    if current != head:
        fail(f"RCA_DATABASE_URL: schema is at {current or 'nothing'}, expected {head}; run `rca migrate`")


def warn_if_blind(settings: Settings) -> None:
    """One warning at start when Prometheus is unset or unreachable: the service runs, but every
    investigation ends inconclusive until it answers (`/readyz` says degraded meanwhile)."""
    problem = prometheus_problem(settings)
    if problem is not None:
        log.warning("%s", problem)


def can_listen(host: str, port: int) -> None:
    """One line now when the address is taken or not this host's, rather than the server's log of
    it and its exit status 3, which means "no data" here."""
    import socket

    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            sock.bind(address)
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --host or --port")
