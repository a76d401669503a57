"""Full-text search on both backends, behind one small interface.

Postgres keeps a stored, generated `tsvector` column (`search_vector`, English stemming) on
`incident_digests` with a GIN index; SQLite keeps an FTS5 table `incident_fts` (porter stemming)
whose rowid is the incident id. Both are created by migration 0005 only, so the model comparison
(`alembic check`, tests/test_migrations.py) is told to ignore them through `include_name`.

A query is the words of `q`, all of which must match (plainto_tsquery / quoted FTS5 terms): the
same meaning on both backends and no query syntax a user can get wrong.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Float,
    Select,
    cast,
    column,
    func,
    literal,
    literal_column,
    select,
    table,
    text,
    type_coerce,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from rca.store.models import IncidentDigest

FTS_TABLE = "incident_fts"
SEARCH_VECTOR = "search_vector"
BACKEND_INDEXES = {"ix_incident_digests_search", "ix_incident_digests_labels", "ix_incident_digests_breached"}
WORD = re.compile(r"\w+", re.UNICODE)


def include_name(name: str | None, type_: str, _parents: dict[str, Any]) -> bool:
    """Alembic autogenerate hook: leave out the backend-specific search objects."""
    if type_ == "table":
        return not (name or "").startswith(FTS_TABLE)
    if type_ == "index":
        return name not in BACKEND_INDEXES
    if type_ == "column":
        return name != SEARCH_VECTOR
    return True


def words(q: str) -> list[str]:
    """The searchable words of a free-text query (punctuation only separates them)."""
    return WORD.findall(q)


def is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def write(session: Session, incident_id: int, document: str) -> None:
    """Keep SQLite's FTS5 row in step with the digest (Postgres generates its column itself)."""
    if is_postgres(session):
        return
    session.execute(text(f"DELETE FROM {FTS_TABLE} WHERE rowid = :id"), {"id": incident_id})
    session.execute(text(f"INSERT INTO {FTS_TABLE} (rowid, document) VALUES (:id, :doc)"),
                    {"id": incident_id, "doc": document})


def apply_match(session: Session, query: Select[Any], q: str) -> tuple[Select[Any], ColumnElement[float]]:
    """Restrict `query` (over incident_digests) to digests containing every word of `q`; also
    return a relevance score, higher is better, as a double so that a cursor carries it exactly."""
    terms = words(q)
    if is_postgres(session):
        tsquery = func.plainto_tsquery("english", " ".join(terms))
        vector = literal_column(f"incident_digests.{SEARCH_VECTOR}")
        return query.where(vector.op("@@")(tsquery)), cast(func.ts_rank_cd(vector, tsquery), Float(precision=53))
    fts = table(FTS_TABLE, column("rowid"), column(FTS_TABLE))
    fts_query = " ".join('"' + term.replace('"', '""') + '"' for term in terms)
    query = query.join(fts, fts.c.rowid == IncidentDigest.incident_id).where(fts.c[FTS_TABLE].op("MATCH")(fts_query))
    # bm25() is lower-is-better; negate it so that both backends sort the same way.
    return query, -func.bm25(fts.c[FTS_TABLE])


def contains(session: Session, column: Any, value: str) -> ColumnElement[bool]:
    """`value` is one element of the JSON list in `column` (GIN-indexed containment on Postgres)."""
    if is_postgres(session):
        return type_coerce(column, JSONB).contains([value])
    each = func.json_each(column).table_valued("value")
    return select(literal(1)).select_from(each).where(each.c.value == value).exists()
