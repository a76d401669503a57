"""UTC time: every stored and compared time is timezone-aware UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def in_utc(value: datetime) -> datetime:
    """An aware time in UTC. ValueError when it has no year in UTC: found by fuzzing,
    0001-01-01T00:00:00+02:00 failed at the database instead of where it came in."""
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("time out of range once converted to UTC") from None
