"""Render the prompts in `prompts/*.j2` (Jinja2); no prompt text lives in Python.

Untrusted text goes through the `untrusted` filter: anything an alert, a span, a past incident's
text, another system's error message or the model itself wrote (the target host, alert names,
labels, annotations, span names and attributes, reasons data is missing, the rules' explanations,
which quote finding details, and the errors of a refused answer). It is JSON-encoded with `<`,
`>` and the Unicode line separators escaped, so it can neither close the `<untrusted-data>` fence
it is wrapped in nor start a line of its own, and the system prompt tells the model to treat
whatever is inside as data. Only what the service itself or its configuration wrote (finding ids
and titles from the profile, taxonomy ids, numbers and times it formatted) is written bare;
`tests/analyst/test_prompts.py` renders every template with hostile text everywhere else.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from rca.analyst.client import ChatMessage
from rca.analyst.summary import Summary
from rca.domain.text import storable_data

FENCE_OPEN, FENCE_CLOSE = "<untrusted-data>", "</untrusted-data>"


# Beyond what JSON escapes (every control character below U+0020): `<` and `>`, so that no fence
# tag can be written, and the characters other than \n and \r that end a line (NEL, LINE SEPARATOR,
# PARAGRAPH SEPARATOR), so that fenced text cannot start a line that reads like the prompt's own.
_ESCAPED = {ord(ch): f"\\u{ord(ch):04x}" for ch in "<>\x85\u2028\u2029"}


def untrusted(value: Any) -> str:
    """Fence untrusted text as inert data (see the module docstring)."""
    encoded = json.dumps(storable_data(value), ensure_ascii=False, sort_keys=True)
    return f"{FENCE_OPEN}{encoded.translate(_ESCAPED)}{FENCE_CLOSE}"


def prompts_dir() -> Path:
    return Path(str(resources.files("rca_prompts")))


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(prompts_dir()),
        undefined=StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters["untrusted"] = untrusted
    env.filters["tojson_compact"] = lambda value: json.dumps(value, separators=(",", ":"))
    return env


def render(name: str, **variables: Any) -> str:
    return environment().get_template(name).render(**variables).strip()


def investigation_messages(summary: Summary, schema: dict[str, Any] | None) -> list[ChatMessage]:
    """System and investigation messages; `schema` is spelt out in the prompt only when the
    endpoint cannot be given it as a response format."""
    return [
        {"role": "system", "content": render("system.j2")},
        {"role": "user", "content": render("investigation.j2", schema=schema, **summary.template_vars())},
    ]


def repair_message(errors: list[str], finding_ids: list[str], categories: list[str]) -> ChatMessage:
    return {
        "role": "user",
        "content": render("repair.j2", errors=errors, finding_ids=finding_ids, categories=categories),
    }
