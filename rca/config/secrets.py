"""Secret settings read from files (`RCA_<NAME>_FILE`, Docker and Kubernetes secrets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic_settings import PydanticBaseSettingsSource

from rca.config.errors import ConfigError

# Settings that may hold a secret, and so may also be read from a file named by RCA_<NAME>_FILE
# (Docker and Kubernetes secrets): credentials in URLs, tokens, keys, and the traces headers.
SECRET_FILE_SETTINGS = (
    "database_url",
    "broker_url",
    "webhook_token",
    "api_tokens",
    "slack_webhook_url",
    "slack_bot_token",
    "slack_signing_secret",
    "traces_headers",
    "llm_api_key",
)


def read_secret_file(setting: str, path: Path) -> str:
    """A secret file's text without its trailing newline; a one-line `ConfigError` naming the
    `*_FILE` setting when it is missing, unreadable or empty."""
    try:
        value = path.read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{setting}: {path} is not UTF-8 text") from None
    if not value.strip():
        raise ConfigError(f"{setting}: {path} is empty")
    return value


class SecretFilesSource(PydanticBaseSettingsSource):
    """Fills RCA_<NAME> from the file that RCA_<NAME>_FILE names. It runs after the init arguments
    and the environment (pydantic-settings hands it what they set as `current_state`), so it can
    refuse a setting given both ways instead of silently picking one."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads whole pairs

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name in SECRET_FILE_SETTINGS:
            path = self.current_state.get(f"{name}_file")
            if path is None or str(path) == "":
                continue
            setting = f"RCA_{name.upper()}_FILE"
            if self.current_state.get(name) not in (None, ""):
                raise ConfigError(f"{setting}: set either RCA_{name.upper()} or {setting}, not both")
            values[name] = read_secret_file(setting, Path(path))
        return values
