"""Inserting many rows of a table at once and learning their ids.

SQLAlchemy writes a many-row INSERT ... RETURNING as one statement with a parameter per value, and
psycopg then parses that statement's text anew each time (it caches only short ones): in the
profile of bench/intake_throughput.py that parse was a fifth of what storing a batch of webhooks
cost. On PostgreSQL the ids are therefore taken from the table's sequence first, in one round trip,
and the rows inserted with them by one short statement for every row (psycopg sends them
pipelined, the statement prepared once). That costs a round trip more, so a few rows, whose
statement psycopg does cache, and SQLite, which has no sequence, keep the RETURNING statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import Insert, Select, Table, bindparam, func, insert, select
from sqlalchemy.orm import Session

# psycopg keeps the parse of a statement with at most this many parameters
# (psycopg._queries.MAX_CACHED_STATEMENT_PARAMS).
CACHED_PARAMS = 50


@cache
def _statements(table: Table) -> tuple[Select[int], Insert, Insert]:
    """Built once per table: the next `n` ids of its sequence, the plain INSERT, the RETURNING one."""
    sequence = func.pg_get_serial_sequence(table.name, "id")
    next_ids = select(func.nextval(sequence)).select_from(func.generate_series(1, bindparam("n")))
    return next_ids, insert(table), insert(table).returning(table.c.id, sort_by_parameter_order=True)


def insert_rows(session: Session, table: Table, rows: Sequence[dict[str, Any]]) -> list[int]:
    """Insert the rows (without their `id`); their new ids, in the order of `rows`."""
    if not rows:
        return []
    next_ids, plain, returning = _statements(table)
    if session.get_bind().dialect.name != "postgresql" or len(rows) * len(rows[0]) <= CACHED_PARAMS:
        return list(session.execute(returning, rows).scalars())
    ids = list(session.scalars(next_ids, {"n": len(rows)}))
    session.execute(plain, [{**row, "id": new} for row, new in zip(rows, ids, strict=True)])
    return ids
