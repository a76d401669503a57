"""Configuration errors: one line that names the setting and says what to do."""

from __future__ import annotations

from pydantic import ValidationError


class ConfigError(Exception):
    """A setting is wrong; the message is one line that names it and says what to do."""


def first_error(exc: ValidationError) -> str:
    """`where: what` for the first problem pydantic found, for one-line error messages."""
    err = exc.errors()[0]
    where = ".".join(str(part) for part in err["loc"]) or "top level"
    return f"{where}: {err['msg']}"
