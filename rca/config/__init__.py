"""Configuration at the bottom of the package: the `RCA_*` settings (`settings`), the optional
YAML file's sections (`files`), secrets read from files (`secrets`), CPU lists (`cpus`), the one
YAML loader (`loader`) and the one-line `ConfigError`. Nothing here imports another stage; the
checks across stages run in `rca.startup`.

The names below are the ones the stages use; they import them from `rca.config`.
"""

from rca.config.errors import ConfigError, first_error
from rca.config.files import FileConfig, ScopeConfig, SlackFileConfig, SlackRoute, TracesConfig, load_file_config
from rca.config.settings import Settings, check_slack_url, get_settings, load_settings

__all__ = [
    "ConfigError",
    "FileConfig",
    "Settings",
    "SlackFileConfig",
    "SlackRoute",
    "ScopeConfig",
    "TracesConfig",
    "check_slack_url",
    "first_error",
    "get_settings",
    "load_file_config",
    "load_settings",
]
