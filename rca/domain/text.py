"""Text every store can keep. PostgreSQL refuses the NUL character in `text` and in JSONB
(`\\u0000`), and no backend can encode a lone UTF-16 surrogate (what JSON's `\\ud800` escape
decodes to in Python). Text we did not write (an LLM's reply, a label, an error message from
another system) passes through `storable` before it is stored or sent on: NUL characters are
dropped, lone surrogates become U+FFFD (the replacement character), everything else is kept.

The API refuses such input with a 422 instead (`rca.api.storable`): a client can be told; a model
or a Prometheus answer cannot, so their text is cleaned.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")
REPLACEMENT = "\ufffd"


def storable(text: str) -> str:
    """`text` without NUL characters and with each lone surrogate replaced by U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A well-formed surrogate pair written as two escapes is joined back into its character;
        # what remains alone is replaced.
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def storable_data(value: T) -> T:
    """A decoded JSON document (dicts, lists, strings, numbers) with every string and key made
    `storable`; other values are returned as they are."""
    return _clean(value)


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        return {(storable(k) if isinstance(k, str) else k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value
