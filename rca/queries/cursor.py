"""Opaque page cursors: the sort key of the last item, bound to the query that produced it.

A cursor is base64url JSON. It names the sort order and carries a fingerprint of the filters, so
a cursor replayed with different parameters is refused (a `QueryError`: the API's 422) instead of
silently skipping rows.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
from datetime import datetime
from typing import Any

from rca.domain.clock import in_utc
from rca.queries.errors import QueryError
from rca.store.incidents import Hit, IncidentFilter, Position


def _fingerprint(filters: IncidentFilter) -> str:
    return hashlib.sha256(repr(filters).encode()).hexdigest()[:16]


def encode_cursor(last: Hit, sort: str, filters: IncidentFilter, anchor: datetime | None) -> str:
    data = {
        "o": sort,
        "f": _fingerprint(filters),
        "t": last.created_at.isoformat(),
        "i": last.incident_id,
        "s": last.score,
        "a": anchor.isoformat() if anchor else None,
    }
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")


def _invalid(reason: str) -> QueryError:
    return QueryError.of("cursor", f"invalid cursor: {reason}", "invalid_cursor")


def _time(text: str) -> datetime:
    """A cursor's time: aware, and with a year in UTC (a forged one may have neither)."""
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError("naive time")
    return in_utc(value)


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _score(value: Any) -> float | None:
    """A relevance score: finite (a NaN or an infinity compares with no row, and the page comes back empty)."""
    if value is None:
        return None
    score = float(value)  # a list or an object is a TypeError, refused below
    if not math.isfinite(score):
        raise ValueError("score is not finite")
    return score


def decode_cursor(cursor: str, sort: str, filters: IncidentFilter) -> Position:
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)), parse_constant=_no_constant)
        position = Position(
            created_at=_time(data["t"]),
            incident_id=int(data["i"]),
            score=_score(data["s"]),
            anchor=None if data["a"] is None else _time(data["a"]),
        )
        order, fingerprint = data["o"], data["f"]
    except (binascii.Error, ValueError, OverflowError, UnicodeDecodeError, KeyError, TypeError):
        # OverflowError: an id of 1e999 (an infinity) has no integer
        raise _invalid("not a cursor returned by this API") from None
    if not 0 < position.incident_id < 2**31:
        raise _invalid("not a cursor returned by this API")
    if order != sort or fingerprint != _fingerprint(filters):
        raise _invalid("it belongs to a search with other parameters; repeat those or start without a cursor")
    if sort == "relevance" and (position.score is None or position.anchor is None):
        raise _invalid("a relevance cursor must carry a score and a snapshot time")
    return position
