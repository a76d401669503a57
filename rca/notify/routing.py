"""Choose the Slack channel of an incident from its labels (bot-token mode).

Routes come from the config file, first match wins:

    slack:
      routes:
        - {match: {severity: critical}, channel: "#sev1"}
        - {match: {team: inference}, channel: "#inference-oncall"}
      default_channel: "#llm-alerts"

A route matches when every label it names has exactly that value on the incident. An incoming
webhook always posts to the channel it was created for, so routing does not apply to it.
"""

from __future__ import annotations

from collections.abc import Mapping

from rca.config import SlackFileConfig


def route(labels: Mapping[str, str], config: SlackFileConfig, fallback: str | None) -> str | None:
    """The channel for an incident with these labels: first matching route, else the default."""
    for candidate in config.routes:
        if all(labels.get(name) == value for name, value in candidate.match.items()):
            return candidate.channel
    return config.default_channel or fallback
