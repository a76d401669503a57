"""Credentials sent in a query string never reach the access log.

The API takes credentials only in the Authorization header, but clients and scanners put them in
the URL anyway (`?token=`, `?api_key=`, `?access_token=`), and uvicorn's access log writes the
path with its query string. A filter on uvicorn's access logger replaces the value of every
credential-like parameter with REDACTED before the line is formatted, whatever handler or format
the deployment configures.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

ACCESS_LOGGER = "uvicorn.access"
REDACTED = "REDACTED"
CREDENTIAL = re.compile(
    r"token|secret|passw|pwd|credential|api[-_]?key|access[-_]?key|auth|session|signature|jwt|bearer|^key$|^sig$",
    re.IGNORECASE,
)


def redact(path: str) -> str:
    """A request's path and query (HTTP's request-target) with the values of credential-like query
    parameters replaced."""
    head, sep, query = path.partition("?")
    if not sep:
        return path
    pairs = []
    for pair in query.split("&"):
        name, eq, _value = pair.partition("=")
        pairs.append(f"{name}={REDACTED}" if eq and CREDENTIAL.search(unquote_plus(name)) else pair)
    return f"{head}?{'&'.join(pairs)}"


class RedactQueryCredentials(logging.Filter):
    """Rewrites the request's path and query among an access-log record's arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(arg) if isinstance(arg, str) and "?" in arg else arg for arg in record.args)
        return True


def install() -> None:
    """Add the filter to uvicorn's access logger, once per process."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, RedactQueryCredentials) for f in logger.filters):
        logger.addFilter(RedactQueryCredentials())
