"""The buttons of an incident's message (bot-token mode only: an incoming webhook's message cannot
be clicked back to us), as Block Kit elements, and the value each carries back.

Every value names the incident and the investigation the message showed, so that a click on an
old message is judged against what it showed (rca/incidents/feedback.py refuses a verdict on an
investigation a newer one superseded). Limits (https://docs.slack.dev/reference/block-kit/block-elements):
a button's value at most 2,000 characters, an option's 150, a select's options at most 100, an
action_id 255; https://docs.slack.dev/reference/block-kit/composition-objects/option-object.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

CONFIRM = "rca_confirm"  # "Confirm <top cause>"
PICK = "rca_pick"  # "Pick another cause" (a static_select of the taxonomy's causes)
AGAIN = "rca_investigate_again"  # "Investigate again"
BLOCK_ID = "rca_actions"
MAX_OPTIONS = 100
MAX_BUTTON_TEXT = 75

Element = dict[str, Any]
ID = Field(ge=1, le=2**31 - 1)


class Shown(BaseModel):
    """What a clicked element's value says: the incident, the investigation its message showed,
    and the cause to confirm (none for "Investigate again")."""

    model_config = ConfigDict(extra="forbid", strict=True)

    incident: int = ID
    investigation: int | None = ID
    cause: str | None = Field(default=None, min_length=1, max_length=64)

    def value(self) -> str:
        return json.dumps(self.model_dump(exclude_none=True), separators=(",", ":"))


def _text(text: str) -> dict[str, str]:
    return {"type": "plain_text", "text": text[:MAX_BUTTON_TEXT]}


def elements(incident_id: int, investigation_id: int | None, top: str | None, causes: list[str]) -> list[Element]:
    """Confirm the top cause (when there is one), pick another, investigate again."""
    shown = Shown(incident=incident_id, investigation=investigation_id)
    found: list[Element] = []
    if top is not None:
        found.append(
            {
                "type": "button",
                "action_id": CONFIRM,
                "text": _text(f"Confirm {top}"),
                "style": "primary",
                "value": shown.model_copy(update={"cause": top}).value(),
            }
        )
    if causes:
        found.append(
            {
                "type": "static_select",
                "action_id": PICK,
                "placeholder": _text("Pick another cause"),
                "options": [
                    {"text": _text(cause), "value": shown.model_copy(update={"cause": cause}).value()}
                    for cause in causes[:MAX_OPTIONS]
                ],
            }
        )
    found.append({"type": "button", "action_id": AGAIN, "text": _text("Investigate again"), "value": shown.value()})
    return found
