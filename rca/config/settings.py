"""Settings from `RCA_*` environment variables (and `RCA_*_FILE` secrets).

Everything the service reads from its environment lives here, so that a bad setting is caught
once, at start-up, and reported as one line that names it (`ConfigError`). Checks that need
other stages (the profile the config file selects, Slack's channel routes) run in
`rca.startup`.
"""

from __future__ import annotations

import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, PrivateAttr, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from rca.config.errors import ConfigError
from rca.config.files import FileConfig, load_file_config
from rca.config.secrets import SECRET_FILE_SETTINGS, SecretFilesSource


class Settings(BaseSettings):
    """Service settings. Unset database and broker mean the embedded mode (SQLite, in-process)."""

    model_config = SettingsConfigDict(env_prefix="RCA_", extra="ignore")
    _file_config: FileConfig | None = PrivateAttr(default=None)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The usual sources, then the RCA_*_FILE secrets (which must see what the others set)."""
        return init_settings, env_settings, dotenv_settings, SecretFilesSource(settings_cls), file_secret_settings

    database_url: str | None = None
    broker_url: str | None = None
    data_dir: Path = Path("rca-data")
    prometheus_url: str | None = None
    prometheus_timeout_seconds: float = Field(default=10.0, gt=0)
    webhook_token: SecretStr | None = None
    webhook_allow_unauthenticated: bool = False
    api_tokens: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    api_allow_unauthenticated: bool = False
    config_file: Path | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    # `rca serve --workers N`: how long a server process may not answer its supervisor's ping
    # before it is killed and replaced. uvicorn's own 5 s kills children that a loaded host has
    # not scheduled in time, starting ones included (issue 35); a hung one is replaced this late.
    serve_worker_healthcheck_seconds: int = Field(default=60, ge=1, le=3600)
    # `rca worker` serves its metrics (every prefork child's summed, docs/metrics.md) here; port 0 = off.
    worker_metrics_host: str = Field(default="127.0.0.1", min_length=1)
    worker_metrics_port: int = Field(default=9808, ge=0, le=65535)
    # How many ports from it the workers of one host share: each takes the first one no other holds.
    worker_metrics_ports: int = Field(default=8, ge=1, le=1024)
    lookback_minutes: int = Field(default=180, ge=10, le=7 * 24 * 60)
    # An incident whose alerts name several hosts investigates each, at most this many
    # (docs/architecture.md, "Fleet incidents").
    fleet_max_hosts: int = Field(default=16, ge=1, le=256)
    max_points_per_series: int = Field(default=1100, ge=100, le=11000)
    min_step_seconds: int = Field(default=15, ge=1)
    query_concurrency: int = Field(default=8, ge=1, le=64)
    # What one request and one webhook notification may carry (docs/intake.md, "Webhook limits"): refused
    # with a 408, 413 or 422 naming the setting, before the work grows with the payload.
    webhook_max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    request_body_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    webhook_max_alerts: int = Field(default=1000, ge=1)
    webhook_max_labels: int = Field(default=100, ge=1)
    webhook_max_name_chars: int = Field(default=256, ge=16)
    webhook_max_label_value_chars: int = Field(default=2048, ge=64)
    webhook_max_annotation_value_chars: int = Field(default=65536, ge=256)
    # Above 2,600 bytes an incompressible key no longer fits the Postgres btree index of open
    # groups (2,704 bytes per index row), and that notification could never be stored.
    webhook_max_group_key_bytes: int = Field(default=2048, ge=64, le=2600)
    investigation_timeout_seconds: float = Field(default=60.0, gt=0)
    sweep_after_seconds: int = Field(default=60, ge=5)
    # How often the scheduler (`rca beat`) sweeps, and how long a running investigation's claim
    # lasts without a heartbeat before the sweep hands it to another worker (rca/jobs/runner.py).
    sweep_interval_seconds: float = Field(default=15.0, gt=0, le=3600)
    investigation_lease_seconds: float = Field(default=30.0, ge=1, le=3600)
    # The fleet scan (rca/scan): early warnings before the SLA alert. Unset RCA_SCAN_ENABLED = on
    # whenever RCA_PROMETHEUS_URL is set (`scan_active`); false turns it off.
    scan_enabled: bool | None = None
    scan_interval_seconds: float = Field(default=30.0, ge=1, le=3600)
    scan_history_minutes: int = Field(default=60, ge=15, le=24 * 60)  # range each scan reads
    scan_trend_minutes: int = Field(default=15, ge=3, le=180)  # window of the Theil-Sen trend
    scan_horizon_minutes: float = Field(default=10.0, gt=0, le=240)  # "watch": forecast to cross within this
    scan_sustain_scans: int = Field(default=3, ge=1, le=100)  # breached this many scans in a row: "warning"
    scan_calm_seconds: float = Field(default=300.0, ge=0, le=86400)  # calm this long: "cleared" / back to "ok"
    scan_slo_probability: float = Field(default=0.8, gt=0, le=1)  # P(SLO breach) that warns at once
    scan_slo_sustain_scans: int = Field(default=1, ge=1, le=100)  # TTFT beyond its SLO this many scans: "warning"
    scan_warmup_seconds: float = Field(default=900.0, ge=0, le=86400)  # early signals held this long after a restart
    # Saturation forecasts (rca/scan/saturation.py): the window of the utilisation's trend, the
    # horizon and P(the batch is full within it) that warns, held `scan_sustain_scans` scans.
    scan_saturation_trend_minutes: int = Field(default=5, ge=1, le=180)
    scan_saturation_horizon_minutes: float = Field(default=15.0, gt=0, le=240)
    scan_saturation_probability: float = Field(default=0.7, gt=0, le=1)
    # Points (targets x steps) of history never read that one scan reads, newest first: at the
    # scanner's start, for a new target or after a gap the history comes in pieces, not at once.
    scan_fill_points: int = Field(default=8000, ge=1, le=10_000_000)
    # How often the scan reads Prometheus' alerting rules again for the operator's SLOs
    # (rca/scan/slo_rules.py): at its first scan, then every this many seconds, never every scan.
    scan_rules_refresh_seconds: float = Field(default=600.0, ge=10, le=86400)
    # Runs handed out (by intake or the sweep) before the sweep gives an investigation up as
    # failed instead of re-queueing it: one that crashes its worker or times out every time.
    investigation_max_attempts: int = Field(default=3, ge=1, le=100)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    slack_webhook_url: SecretStr | None = None
    slack_bot_token: SecretStr | None = None
    slack_channel: str | None = None
    slack_api_url: str = "https://slack.com/api/"
    slack_timeout_seconds: float = Field(default=10.0, gt=0, le=120)
    slack_max_attempts: int = Field(default=6, ge=1, le=50)
    slack_retry_backoff_seconds: float = Field(default=2.0, gt=0, le=600)
    # A notice Slack refused for good stays owed and is tried again after this long (a fixed
    # token or channel then gets its post), instead of being dropped.
    slack_failed_retry_seconds: float = Field(default=900.0, ge=1, le=86400)
    # The Slack app's signing secret: the only proof that a button click came from Slack
    # (POST /slack/interactivity, docs/slack.md). Unset: the endpoint answers 404.
    slack_signing_secret: SecretStr | None = None
    public_url: str | None = None
    traces_backend: Literal["none", "jaeger", "tempo"] = "none"
    traces_url: str | None = Field(default=None, validate_default=True)
    traces_headers: Annotated[dict[str, SecretStr], NoDecode] = Field(default_factory=dict)
    traces_timeout_seconds: float = Field(default=10.0, gt=0)
    traces_sample_size: int = Field(default=300, ge=10, le=5000)
    traces_max_spans_per_trace: int = Field(default=2000, ge=10, le=100_000)
    traces_budget_seconds: float = Field(default=20.0, gt=0)
    traces_concurrency: int = Field(default=8, ge=1, le=64)
    # The LLM analyst (rca/analyst). No base URL = the deterministic rules analyst writes the hypotheses.
    llm_base_url: str | None = None  # an OpenAI-compatible API, ending in /v1
    llm_model: str | None = None
    llm_api_key: SecretStr | None = None
    llm_timeout_seconds: float = Field(default=30.0, gt=0)  # all calls of one investigation together
    llm_max_retries: int = Field(default=2, ge=0, le=10)
    llm_prompt_token_budget: int = Field(default=4000, ge=500)
    llm_max_completion_tokens: int = Field(default=800, ge=64)
    llm_price_per_1k_prompt_tokens: float = Field(default=0.0, ge=0)
    llm_price_per_1k_completion_tokens: float = Field(default=0.0, ge=0)
    llm_cache_seconds: int = Field(default=900, ge=0)  # 0 = never reuse an earlier answer
    # RCA_<NAME>_FILE: read that secret setting from a file instead (see SECRET_FILE_SETTINGS).
    database_url_file: Path | None = None
    broker_url_file: Path | None = None
    webhook_token_file: Path | None = None
    api_tokens_file: Path | None = None  # comma- or newline-separated tokens
    slack_webhook_url_file: Path | None = None
    slack_bot_token_file: Path | None = None
    slack_signing_secret_file: Path | None = None
    traces_headers_file: Path | None = None
    llm_api_key_file: Path | None = None

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_log_level(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("api_tokens", mode="before")
    @classmethod
    def _split_tokens(cls, value: Any) -> Any:
        if isinstance(value, str):  # commas, or one a line (a token file)
            return [token.strip() for token in re.split(r"[,\n]", value) if token.strip()]
        return value

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            url = make_url(value)
        except ArgumentError as exc:
            raise ValueError(f"not a database URL ({exc})") from None
        if url.get_backend_name() not in ("postgresql", "sqlite"):
            raise ValueError(f"unsupported database '{url.get_backend_name()}'; use postgresql or sqlite")
        if url.get_backend_name() == "postgresql" and url.get_driver_name() in ("psycopg2", "default"):
            # psycopg 3 is the driver we ship; accept the common `postgresql://` spelling.
            value = url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        return value

    @field_validator("broker_url")
    @classmethod
    def _check_broker_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "amqp://", "memory://")):
            raise ValueError("must start with redis://, rediss://, amqp:// or memory://")
        return value

    @field_validator("prometheus_url", "public_url", "llm_base_url")
    @classmethod
    def _check_http_url(cls, value: str | None) -> str | None:
        return _http_url(value) if value is not None else None

    @field_validator("slack_webhook_url")
    @classmethod
    def _check_slack_webhook_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_slack_url(value.get_secret_value())
        return value

    @field_validator("slack_api_url")
    @classmethod
    def _check_slack_api_url(cls, value: str) -> str:
        check_slack_url(value)
        return value if value.endswith("/") else value + "/"  # slack_sdk appends the method name

    @field_validator("slack_bot_token")
    @classmethod
    def _check_slack_bot_token(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith("xoxb-"):
            raise ValueError("must be a bot token (xoxb-...)")
        return value

    @property
    def slack_enabled(self) -> bool:
        """True when incidents are posted to Slack (webhook or bot token)."""
        return bool(self.slack_webhook_url or self.slack_bot_token)

    @field_validator("traces_url")
    @classmethod
    def _check_traces_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        backend = info.data.get("traces_backend", "none")
        if value is None:
            if backend != "none":
                raise ValueError(f"required when RCA_TRACES_BACKEND={backend}")
            return None
        return _http_url(value)

    @field_validator("traces_headers", mode="before")
    @classmethod
    def _parse_traces_headers(cls, value: Any) -> Any:
        """`{"Authorization": "Bearer ...", "X-Scope-OrgID": "tenant"}` as JSON; values are secrets."""
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except ValueError:
                raise ValueError("must be a JSON object of header names to values") from None
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ValueError("must be a JSON object of header names to string values")
        return value

    @model_validator(mode="after")
    def _check_llm(self) -> Settings:
        if self.llm_base_url and not self.llm_model:
            raise ValueError("RCA_LLM_MODEL: required when RCA_LLM_BASE_URL is set")
        if self.llm_base_url and self.llm_timeout_seconds >= self.investigation_timeout_seconds:
            raise ValueError(
                "RCA_LLM_TIMEOUT_SECONDS: must be below RCA_INVESTIGATION_TIMEOUT_SECONDS "
                f"({self.investigation_timeout_seconds:g}), or the worker kills the investigation "
                "before the fallback can answer"
            )
        return self

    @property
    def llm_configured(self) -> bool:
        """True when an LLM endpoint is set; otherwise the rules analyst writes the hypotheses."""
        return bool(self.llm_base_url and self.llm_model)

    @property
    def scan_active(self) -> bool:
        """True when the fleet scan runs: RCA_SCAN_ENABLED, else whenever Prometheus is configured."""
        return bool(self.prometheus_url) and self.scan_enabled is not False

    @property
    def effective_database_url(self) -> str:
        """The configured database, or the embedded SQLite file under `data_dir`."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'rca.db').resolve()}"

    @property
    def embedded_queue(self) -> bool:
        """True when investigations run in-process because no broker is configured."""
        return not self.broker_url

    def file_config(self) -> FileConfig:
        """The config file, read once per Settings (not once per investigation)."""
        if self._file_config is None:
            self._file_config = load_file_config(self.config_file)
        return self._file_config


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _http_url(value: str) -> str:
    """An http(s) base URL without its trailing slash."""
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/")


def check_slack_url(url: str) -> None:
    """Slack URLs must be https; plain http is allowed only to this machine (a local relay or a test
    server), so a secret-bearing webhook URL never crosses a network in clear text."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS:
        return
    raise ValueError("must be an https:// URL (http:// only to 127.0.0.1 or localhost)")


def settings_file_given(field: str, overrides: dict[str, Any]) -> bool:
    """Whether RCA_<FIELD>_FILE was set (as an argument or in the environment), for error messages."""
    if overrides.get(f"{field}_file"):
        return True
    wanted = f"RCA_{field}_FILE".upper()
    return any(name.upper() == wanted and value for name, value in os.environ.items())


def load_settings(**overrides: Any) -> Settings:
    """Build settings, turning the first validation error into a one-line `ConfigError`."""
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        err = exc.errors()[0]
        if not err["loc"]:  # a check across settings (model validator) names the setting itself
            raise ConfigError(err["msg"].removeprefix("Value error, ")) from None
        name = "RCA_" + str(err["loc"][0]).upper()
        given = err.get("input")
        secret = any(word in name.lower() for word in ("token", "url", "header", "key"))
        shown = "" if secret or isinstance(given, dict) or given is None else f" (got {given!r})"
        field = str(err["loc"][0])
        if field in SECRET_FILE_SETTINGS and settings_file_given(field, overrides):
            shown += f" (read from {name}_FILE)"
        raise ConfigError(f"{name}: {err['msg']}{shown}") from None
    if settings.slack_webhook_url and settings.slack_bot_token:
        raise ConfigError("RCA_SLACK_BOT_TOKEN: set either RCA_SLACK_WEBHOOK_URL or RCA_SLACK_BOT_TOKEN, not both")
    return settings


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings, read once."""
    return load_settings()
