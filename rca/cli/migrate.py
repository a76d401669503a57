"""`rca migrate`: create or upgrade the database schema."""

from __future__ import annotations

import argparse
import logging

from rca.cli.common import Command, fail
from rca.config import Settings


def add_parser(command: Command) -> None:
    mig = command(
        "migrate",
        "create or upgrade the database schema",
        "Run the Alembic migrations on RCA_DATABASE_URL (or the embedded SQLite file).",
    )
    mig.add_argument("revision", nargs="?", default="head", help="Alembic revision to migrate to")
    mig.set_defaults(func=run)


def _migration_steps(record: logging.LogRecord) -> bool:
    """Of alembic's migration lines, the steps it runs ("Running upgrade 0014 -> 0015, ...")."""
    return record.msg == "Running %s"


def run(settings: Settings, args: argparse.Namespace) -> None:
    from alembic.util import CommandError
    from sqlalchemy.exc import OperationalError

    from rca.store.db import migrate

    steps = logging.getLogger("alembic.runtime.migration")
    steps.setLevel(max(logging.INFO, logging.root.level))
    steps.addFilter(_migration_steps)
    try:
        migrate(settings.effective_database_url, args.revision)
    except OperationalError as exc:
        fail(f"RCA_DATABASE_URL: cannot connect ({str(exc.orig).strip().splitlines()[0]}); is the database running?")
    except CommandError as exc:  # a revision alembic does not know
        fail(f"revision {args.revision!r}: {exc}")
    print(f"database migrated to {args.revision}")
