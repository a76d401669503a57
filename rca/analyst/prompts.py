"""Render the prompts in `prompts/*.j2` (Jinja2); no prompt text lives in Python.

Untrusted text (alert labels and annotations, span attributes) goes through the `untrusted`
filter: it is JSON-encoded with `<` and `>` escaped, so it cannot close the
`<untrusted-data>` fence it is wrapped in nor add lines of its own, and the system prompt tells
the model to treat whatever is inside as data.
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

FENCE_OPEN, FENCE_CLOSE = "<untrusted-data>", "</untrusted-data>"


def untrusted(value: Any) -> str:
    """Fence untrusted text as inert data (see the module docstring)."""
    encoded = json.dumps(value, ensure_ascii=False, sort_keys=True)
    encoded = encoded.replace("<", "\\u003c").replace(">", "\\u003e")
    return f"{FENCE_OPEN}{encoded}{FENCE_CLOSE}"


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
