"""How much one webhook notification may carry, checked while the payload is validated.

Each limit is a setting (docs/intake.md, "Webhook limits") so that an unusual fleet can raise it; the
checks run in the schema's validators (rca/intake/schema.py), which get these limits as pydantic's
validation context. Without a context (`rca investigate --payload`, which stores nothing) only the
limits the database itself sets apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rca.config import Settings


@dataclass(frozen=True)
class IntakeLimits:
    max_alerts: int
    max_labels: int  # entries of one label or annotation map
    max_name_chars: int  # a label or annotation name
    max_label_value_chars: int
    max_annotation_value_chars: int
    max_group_key_bytes: int  # UTF-8 bytes: what the database index measures

    @classmethod
    def from_settings(cls, settings: Settings) -> IntakeLimits:
        return cls(
            max_alerts=settings.webhook_max_alerts,
            max_labels=settings.webhook_max_labels,
            max_name_chars=settings.webhook_max_name_chars,
            max_label_value_chars=settings.webhook_max_label_value_chars,
            max_annotation_value_chars=settings.webhook_max_annotation_value_chars,
            max_group_key_bytes=settings.webhook_max_group_key_bytes,
        )

    def context(self) -> dict[str, Any]:
        """The validation context that carries these limits to the schema."""
        return {CONTEXT_KEY: self}


CONTEXT_KEY = "intake_limits"


def of(context: Any) -> IntakeLimits | None:
    """The limits a validator was given, if any."""
    found = context.get(CONTEXT_KEY) if isinstance(context, dict) else None
    return found if isinstance(found, IntakeLimits) else None
