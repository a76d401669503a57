"""Full-text search on both backends, behind one small interface.

Postgres keeps a stored, generated `tsvector` column (`search_vector`, English stemming) on
`incident_digests` with a GIN index; SQLite keeps an FTS5 table `incident_fts` (porter stemming)
whose rowid is the incident id. Both are created by migration 0005 only, so the model comparison
(`alembic check`, tests/store/test_migrations.py) is told to ignore them through `include_name`.

A query is the words of `q`, all of which must match (plainto_tsquery / quoted FTS5 terms): the
same meaning on both backends and no query syntax a user can get wrong.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnClause,
    ColumnElement,
    Float,
    and_,
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
from sqlalchemy.dialects.postgresql import JSONB, TSQUERY
from sqlalchemy.orm import Session

from rca.store import word_frequency
from rca.store.models import IncidentDigestRow

FTS_TABLE = "incident_fts"
SEARCH_VECTOR = "search_vector"
BACKEND_INDEXES = {"ix_incident_digests_search", "ix_incident_digests_labels", "ix_incident_digests_breached"}
WORD = re.compile(r"\w+", re.UNICODE)
COMMON_WORD = 0.3  # share of digests above which a word is left out of the GIN scan


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
    session.execute(
        text(f"INSERT INTO {FTS_TABLE} (rowid, document) VALUES (:id, :doc)"), {"id": incident_id, "doc": document}
    )


def _tsquery(q: str) -> ColumnElement[Any]:
    return func.plainto_tsquery("english", " ".join(words(q)))


def _fts_query(q: str) -> str:
    return " ".join('"' + term.replace('"', '""') + '"' for term in words(q))


@dataclass(frozen=True)
class Query:
    """A full-text query prepared for one search."""

    condition: ColumnElement[bool]  # the digest contains every word (checked row by row in a walk)
    indexed: ColumnElement[bool]  # the same, phrased for a GIN bitmap scan (see `prepare`)
    density: float  # at most this share of digests can match (1.0 when not known)


def prepare(session: Session, q: str) -> Query:
    """Conditions on incident_digests for `q`, and how many digests can match at most.

    On Postgres, with word frequencies at hand (`rca.store.word_frequency`), the rarest word bounds
    the matches, and the GIN index is asked only for the words in fewer than `COMMON_WORD` of the
    digests while the whole query is checked on the rows it returns (`ts_match_vq`, the function
    behind @@, which no index serves): same result, without reading posting lists that hold nearly
    every incident.
    """
    if not is_postgres(session):
        fts = table(FTS_TABLE, column("rowid"), column(FTS_TABLE))
        condition = IncidentDigestRow.incident_id.in_(
            select(fts.c.rowid).where(fts.c[FTS_TABLE].op("MATCH")(_fts_query(q)))
        )
        return Query(condition=condition, indexed=condition, density=1.0)
    vector: ColumnClause[Any] = literal_column(f"incident_digests.{SEARCH_VECTOR}")
    condition = vector.op("@@")(_tsquery(q))
    known = word_frequency.statistics(session).words
    if known is None:
        return Query(condition=condition, indexed=condition, density=1.0)
    lexemes = word_frequency.lexemes(session, " ".join(words(q)))
    if not lexemes:  # only stop words: nothing matches
        return Query(condition=condition, indexed=condition, density=0.0)
    selective = [lexeme for lexeme in lexemes if known.of(lexeme) < COMMON_WORD]
    density = min(known.of(lexeme) for lexeme in lexemes)
    if not selective or len(selective) == len(lexemes):
        return Query(condition=condition, indexed=condition, density=density)
    keys = cast(
        " & ".join("'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'" for lexeme in selective), TSQUERY
    )
    indexed = and_(vector.op("@@")(keys), func.ts_match_vq(vector, _tsquery(q)))
    return Query(condition=condition, indexed=indexed, density=density)


def rank(session: Session, q: str) -> ColumnElement[float] | None:
    """The relevance of a digest row to `q` as an expression (Postgres), so that it is computed
    while the row is at hand; None on SQLite, whose bm25() needs the MATCH query (`sqlite_scores`)."""
    if not is_postgres(session):
        return None
    vector: ColumnClause[Any] = literal_column(f"incident_digests.{SEARCH_VECTOR}")
    return cast(func.ts_rank_cd(vector, _tsquery(q)), Float(precision=53))


def sqlite_scores(session: Session, q: str, incident_ids: list[int]) -> dict[int, float]:
    """Relevance of each of these digests to `q` on SQLite: bm25() is lower-is-better, so it is
    negated to sort like Postgres' `ts_rank_cd` (see `rank`)."""
    if not incident_ids:
        return {}
    fts = table(FTS_TABLE, column("rowid"), column(FTS_TABLE))
    query = select(fts.c.rowid, -func.bm25(fts.c[FTS_TABLE])).where(
        fts.c[FTS_TABLE].op("MATCH")(_fts_query(q)), fts.c.rowid.in_(incident_ids)
    )
    return {incident_id: score for incident_id, score in session.execute(query)}


def contains(session: Session, column: Any, value: str) -> ColumnElement[bool]:
    """`value` is one element of the JSON list in `column` (GIN-indexed containment on Postgres)."""
    if is_postgres(session):
        return type_coerce(column, JSONB).contains([value])
    each = func.json_each(column).table_valued("value")
    return select(literal(1)).select_from(each).where(each.c.value == value).exists()
