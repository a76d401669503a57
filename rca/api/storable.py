"""Text the database can store: Postgres text and JSONB refuse the NUL character, and no backend
can encode a lone UTF-16 surrogate (which JSON's \\ud800 escapes can produce). Such input is the
client's error (422), found before anything is written."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import Request

from rca.api.errors import Loc, unprocessable

UNSTORABLE = "unstorable_text"


def problem(value: Any, loc: Loc = ()) -> tuple[Loc, str] | None:
    """Where `value` (a decoded JSON document or one string) holds text we cannot store, and why; or None."""
    if isinstance(value, str):
        if "\x00" in value:
            return loc, "the NUL character (\\u0000) is not allowed"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return loc, "a lone UTF-16 surrogate is not valid text"
        return None
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        # A bad key is reported at the object that holds it.
        found = problem(key, loc) if isinstance(key, str) else None
        found = found or problem(item, (*loc, key))
        if found:
            return found
    return None


def require_storable_query(request: Request) -> None:
    """Router dependency: refuse query parameters that the database could not compare against."""
    for name, value in request.query_params.multi_items():
        found = problem(value, ("query", name))
        if found:
            raise unprocessable(found[0], f"query parameter {name}: {found[1]}", UNSTORABLE)
