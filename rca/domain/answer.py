"""A server's answer in one short line, for a message. An error we print, store or log quotes what
the server said, never its whole page: a proxy's HTML error page or a login page becomes its
title, Prometheus' API error (`{"status": "error", "errorType": ..., "error": ...}`) its type and
sentence, other JSON errors (OpenAI's `{"error": {"message"}}`, FastAPI's `{"detail"}`) their
message, and any other text its first characters with the whitespace of its lines folded.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

ANSWER_CHARS = 160  # about the width a terminal's message has left after its own words
_HTML_START = re.compile(r"\s*<(?:!doctype\s+html|html|head|body|title|h1|\?xml)\b", re.IGNORECASE)
_TITLE = re.compile(r"<(title|h1)\b[^>]*>(.*?)</\1\s*>", re.IGNORECASE | re.DOTALL)
_INVISIBLE = re.compile(r"<(script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")


def answer_line(body: str | bytes | None, limit: int = ANSWER_CHARS) -> str:
    """What the server said, in at most `limit` characters on one line ("an empty answer" for none)."""
    text = (body.decode("utf-8", "replace") if isinstance(body, bytes) else body or "").strip()
    if not text:
        return "an empty answer"
    said = _json_error(text)
    if said is None and _HTML_START.match(text):
        said = _html_page(text)
    return _one_line(text if said is None else said, limit)


def _json_error(text: str) -> str | None:
    """The error a JSON answer states, or the whole document compacted; None when not JSON."""
    if text[0] not in "{[":
        return None
    try:
        document: Any = json.loads(text)
    except ValueError:
        return None
    if isinstance(document, dict):
        error = document.get("error")
        if isinstance(error, str) and error:  # Prometheus' API
            kind = document.get("errorType")
            return f"{kind}: {error}" if isinstance(kind, str) and kind else error
        if isinstance(error, dict) and isinstance(error.get("message"), str):  # OpenAI-compatible servers
            return error["message"]
        for key in ("message", "detail"):
            if isinstance(document.get(key), str):
                return document[key]
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def _html_page(text: str) -> str:
    """An HTML page by its title (or first heading), else by its visible text."""
    found = _TITLE.search(text)
    words = _visible(found.group(2)) if found else ""
    words = words or _visible(_INVISIBLE.sub(" ", text))
    return f"an HTML page: {words}" if words else "an HTML page"


def _visible(markup: str) -> str:
    return " ".join(html.unescape(_TAG.sub(" ", markup)).split())


def _one_line(text: str, limit: int) -> str:
    """Whitespace folded to single spaces, control characters dropped, cut at `limit` with an ellipsis."""
    text = "".join(ch for ch in " ".join(text.split()) if ch.isprintable())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
