"""How common each search word is, read from Postgres' own statistics of the search vector.

ANALYZE keeps, for a tsvector column, its most common lexemes and the share of rows holding each
(`pg_stats.most_common_elems`); a lexeme not listed is rarer than the rarest listed one. Search
uses this twice (`rca.store.fts.prepare`):

- the rarest word of a query bounds how many digests can match all of its words, with no
  independence guess, which tells a search whether walking the newest incidents can pay;
- words in most digests ("gpu", "node" of "gpu-node-1777") make the GIN scan read long posting
  lists for nothing, so the index is asked for the selective words only and the rest are checked
  on the rows it returns.

Statistics change slowly, so they are read once per `REFRESH_SECONDS` per database, together
with the planner's row count of the table (`pg_class.reltuples`), which search also needs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session

REFRESH_SECONDS = 600.0


@dataclass(frozen=True)
class Frequencies:
    known: dict[str, float]  # lexeme -> share of digests that hold it
    floor: float  # any lexeme not in `known` is in fewer digests than this share

    def of(self, lexeme: str) -> float:
        return self.known.get(lexeme, self.floor)


@dataclass(frozen=True)
class Statistics:
    rows: int  # about how many digests there are (0 before the first ANALYZE)
    words: Frequencies | None  # None before the first ANALYZE


_statistics: dict[str, tuple[float, Statistics]] = {}
_lexemes: dict[str, list[str]] = {}
_lock = threading.Lock()
LEXEME_CACHE = 10_000


def statistics(session: Session) -> Statistics:
    """The planner's row count of `incident_digests` and its search vector's lexeme frequencies."""
    key = str(session.get_bind().engine.url)
    now = time.monotonic()
    with _lock:
        cached = _statistics.get(key)
    if cached is not None and now - cached[0] < REFRESH_SECONDS:
        return cached[1]
    row = session.execute(
        text(
            "SELECT c.reltuples, s.most_common_elems::text::text[], s.most_common_elem_freqs FROM pg_class c "
            "LEFT JOIN pg_stats s ON s.schemaname = current_schema() AND s.tablename = c.relname "
            "AND s.attname = 'search_vector' WHERE c.oid = 'incident_digests'::regclass"
        )
    ).one()
    words = None
    if row[1]:
        elems, freqs = row[1], row[2][: len(row[1])]  # then come the minimum, maximum and null share
        words = Frequencies(known=dict(zip(elems, freqs, strict=True)), floor=min(freqs))
    found = Statistics(rows=max(int(row[0]), 0), words=words)
    with _lock:
        _statistics[key] = (now, found)
    return found


def lexemes(session: Session, words: str) -> list[str]:
    """The lexemes Postgres indexes for these words (English stemming, stop words dropped);
    remembered, since the same words always give the same lexemes."""
    with _lock:
        known = _lexemes.get(words)
    if known is not None:
        return known
    found = list(session.scalar(text("SELECT tsvector_to_array(to_tsvector('english', :q))"), {"q": words}) or [])
    with _lock:
        if len(_lexemes) >= LEXEME_CACHE:
            _lexemes.clear()
        _lexemes[words] = found
    return found
