"""UTC time: every stored and compared time is timezone-aware UTC."""

from __future__ import annotations

import re
from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


# An RFC 3339 / ISO 8601 date-time as the OpenAPI `date-time` format means it: a date, a time and a
# zone. Without this check pydantic also takes a number of seconds ("0.5", "-5", 1700000000), which
# no schema states and nobody means.
ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def iso_datetime(value: object) -> object:
    """`value` unchanged when it is None, a datetime or a text that starts as an ISO 8601
    date-time; ValueError (pydantic's error) otherwise. Used before pydantic parses a `date-time`."""
    if value is None or isinstance(value, datetime) or (isinstance(value, str) and ISO_DATETIME.match(value)):
        return value
    raise ValueError("a date-time in ISO 8601 with its zone is needed, e.g. 2026-12-07T16:00:00Z")


def in_utc(value: datetime) -> datetime:
    """An aware time in UTC. ValueError when it has no year in UTC: found by fuzzing,
    0001-01-01T00:00:00+02:00 failed at the database instead of where it came in."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("time out of range once converted to UTC") from None
