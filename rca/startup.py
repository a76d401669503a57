"""Start-up checks across stages: settings that are each valid but do not fit together, or a
config file whose profile does not load. `rca` commands, the Celery worker and the benches call
`checked_settings` so that such a mistake stops the process at once, as one line, instead of
failing the first investigation.

A missing or unreachable Prometheus does not stop anything (the service still takes alerts, and
Prometheus may come up later), but every investigation meanwhile ends inconclusive:
`prometheus_problem` says so in one line, which `rca serve` and `rca worker` log at start and
`/readyz` reports as degraded."""

from __future__ import annotations

from typing import Any

from rca.collect.health import unreachable
from rca.collect.profile import profile_for
from rca.config import ConfigError, Settings, load_settings


def check(settings: Settings) -> Settings:
    """`settings` when they fit together; else a one-line `ConfigError` naming the setting."""
    try:  # validate the file and the profile it selects now, not at the first investigation
        profile_for(settings.file_config())
    except ConfigError as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith("RCA_") else f"RCA_CONFIG_FILE: {message}") from None
    slack_file = settings.file_config().slack
    if settings.slack_bot_token and not (settings.slack_channel or slack_file.default_channel):
        raise ConfigError(
            "RCA_SLACK_CHANNEL: not set; the bot token needs a default channel "
            "(or slack.default_channel in RCA_CONFIG_FILE)"
        )
    return settings


def checked_settings(**overrides: Any) -> Settings:
    """`load_settings(**overrides)`, checked."""
    return check(load_settings(**overrides))


PROMETHEUS_CHECK_SECONDS = 2.0  # one query; /readyz runs it beside the other checks


def prometheus_problem(settings: Settings) -> str | None:
    """Why investigations cannot read metrics now, as one line naming the setting; None when the
    configured Prometheus answers."""
    url = settings.prometheus_url
    if not url:
        return (
            "RCA_PROMETHEUS_URL: not set; investigations read no metrics and end inconclusive, with no cause, "
            "until it names the Prometheus that scrapes the fleet"
        )
    problem = unreachable(url, min(settings.prometheus_timeout_seconds, PROMETHEUS_CHECK_SECONDS))
    if problem is None:
        return None
    return (
        f"RCA_PROMETHEUS_URL: Prometheus at {url} is unreachable ({problem}); investigations end inconclusive, "
        "with no cause, until it answers"
    )
