"""Settings from `RCA_*` environment variables plus an optional YAML config file.

Everything the service reads from its environment lives here, so that a bad setting is caught
once, at start-up, and reported as one line that names it (`ConfigError`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, Field, PrivateAttr, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError


class ConfigError(Exception):
    """A setting is wrong; the message is one line that names it and says what to do."""


def first_error(exc: ValidationError) -> str:
    """`where: what` for the first problem pydantic found, for one-line error messages."""
    err = exc.errors()[0]
    where = ".".join(str(part) for part in err["loc"]) or "top level"
    return f"{where}: {err['msg']}"


class TargetConfig(BaseModel):
    """How alert labels are turned into the scope of an investigation."""

    model_config = {"extra": "forbid"}  # a misspelt key must not silently fall back to the default

    host_labels: list[str] = Field(
        default=["instance", "Hostname", "hostname", "node", "host", "nodename"],
        description="Labels that name the host, in order of preference; a port suffix is dropped.",
    )
    scope_labels: list[str] = Field(
        default=["namespace", "pod", "model_name", "job"],
        description="Labels that narrow the serving target when the alert carries them.",
    )
    gpu_host_labels: list[str] = Field(
        default=["Hostname", "hostname", "instance"],
        description="Labels on GPU exporter series that may carry the host name.",
    )


MAX_CPU_ID = 8191  # the kernel's NR_CPUS ceiling on x86_64; anything above is a typo


def _decimal(text: str) -> bool:
    return text.isascii() and text.isdigit()


def parse_cpu_list(text: str) -> list[int]:
    """A Linux CPU list (`isolcpus`, `taskset -c`, `cpuset.cpus` syntax: `4-7,12`) as sorted ids.

    Raises ValueError saying what is wrong; the config file reports it under `pinned_cpus`.
    """
    cpus: set[int] = set()
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise ValueError("empty CPU list; write it like 4-7,12")
    for item in items:
        if not item:
            raise ValueError(f"empty item in CPU list {text!r}; write it like 4-7,12")
        low, sep, high = (part.strip() for part in item.partition("-"))
        if not _decimal(low) or (sep and not _decimal(high)):
            raise ValueError(f"{item!r} is not a CPU id or a range like 4-7")
        first, last = int(low), int(high) if sep else int(low)
        if first > last:
            raise ValueError(f"range {item!r} runs backwards")
        if last > MAX_CPU_ID:
            raise ValueError(f"CPU id {last} is above {MAX_CPU_ID}")
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def cpu_list_regex(cpus: list[int]) -> str:
    """`[4, 5, 12]` -> `4|5|12`, for a `cpu=~"..."` matcher (node_exporter's `cpu` label is the id)."""
    return "|".join(str(cpu) for cpu in cpus)


class FileConfig(BaseModel):
    """The optional config file (`RCA_CONFIG_FILE`): thresholds and profile overrides."""

    model_config = {"extra": "forbid"}

    thresholds: dict[str, float] = Field(default_factory=dict)
    profile: str | None = None
    stack: str | None = Field(default=None, description="serving stack id; unset = detect from metric names")
    slo_ttft_seconds: float = Field(default=2.0, gt=0, allow_inf_nan=False,
                                    description="TTFT p95 SLO for the violation-probability model (seconds)")
    slo_probability_threshold: float = Field(default=0.5, gt=0, le=1,
                                             description="P(SLO violation | queue depth) that breaches that finding")
    pinned_cpus: str | None = Field(
        default=None,
        description="CPUs the serving engine is pinned to (`4-7,12`), for hosts without isolcpus",
    )
    target: TargetConfig = Field(default_factory=TargetConfig)

    @field_validator("pinned_cpus", mode="before")
    @classmethod
    def _check_pinned_cpus(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # `pinned_cpus: 4` in YAML is an int
        if isinstance(value, str):
            parse_cpu_list(value)
        return value

    def query_params(self) -> dict[str, str]:
        """Values for the profile's operator placeholders (`rca.collect.profile.PARAMETERS`)."""
        params = {}
        if self.pinned_cpus is not None:
            params["pinned_cpus"] = cpu_list_regex(parse_cpu_list(self.pinned_cpus))
        return params


class Settings(BaseSettings):
    """Service settings. Unset database and broker mean the embedded mode (SQLite, in-process)."""

    model_config = SettingsConfigDict(env_prefix="RCA_", extra="ignore")
    _file_config: FileConfig | None = PrivateAttr(default=None)

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
    lookback_minutes: int = Field(default=180, ge=10, le=7 * 24 * 60)
    max_points_per_series: int = Field(default=1100, ge=100, le=11000)
    min_step_seconds: int = Field(default=15, ge=1)
    query_concurrency: int = Field(default=8, ge=1, le=64)
    webhook_max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    investigation_timeout_seconds: float = Field(default=60.0, gt=0)
    sweep_after_seconds: int = Field(default=60, ge=5)
    log_level: str = "INFO"
    # The LLM analyst (rca/analyst). No base URL = the deterministic rules analyst writes the hypotheses.
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: SecretStr | None = None
    llm_timeout_seconds: float = Field(default=30.0, gt=0)  # all calls of one investigation together
    llm_max_retries: int = Field(default=2, ge=0, le=10)
    llm_prompt_token_budget: int = Field(default=4000, ge=500)
    llm_max_completion_tokens: int = Field(default=800, ge=64)
    llm_price_per_1k_prompt_tokens: float = Field(default=0.0, ge=0)
    llm_price_per_1k_completion_tokens: float = Field(default=0.0, ge=0)
    llm_cache_seconds: int = Field(default=900, ge=0)  # 0 = never reuse an earlier answer

    @field_validator("api_tokens", mode="before")
    @classmethod
    def _split_tokens(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [token.strip() for token in value.split(",") if token.strip()]
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

    @field_validator("prometheus_url")
    @classmethod
    def _check_prometheus_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/") if value else value

    @field_validator("llm_base_url")
    @classmethod
    def _check_llm_base_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL of an OpenAI-compatible API (ending in /v1)")
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _check_llm(self) -> Settings:
        if self.llm_base_url and not self.llm_model:
            raise ValueError("RCA_LLM_MODEL: required when RCA_LLM_BASE_URL is set")
        if self.llm_base_url and self.llm_timeout_seconds >= self.investigation_timeout_seconds:
            raise ValueError("RCA_LLM_TIMEOUT_SECONDS: must be below RCA_INVESTIGATION_TIMEOUT_SECONDS "
                             f"({self.investigation_timeout_seconds:g}), or the worker kills the investigation "
                             "before the fallback can answer")
        return self

    @property
    def llm_configured(self) -> bool:
        """True when an LLM endpoint is set; otherwise the rules analyst writes the hypotheses."""
        return bool(self.llm_base_url and self.llm_model)

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


def load_file_config(path: Path | None) -> FileConfig:
    """Read and validate the YAML config file; errors name the file and the key."""
    if path is None:
        return FileConfig()
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"RCA_CONFIG_FILE: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"RCA_CONFIG_FILE: {path} is not valid YAML: {exc}".replace("\n", " ")) from None
    try:
        return FileConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"RCA_CONFIG_FILE: {path}: {first_error(exc)}") from None


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
        secret = any(word in name.lower() for word in ("token", "url", "key"))
        shown = "" if secret or isinstance(given, dict) or given is None else f" (got {given!r})"
        raise ConfigError(f"{name}: {err['msg']}{shown}") from None
    from rca.collect.profile import profile_for  # imports this module

    try:  # validate the file and the profile it selects now, not at the first investigation
        profile_for(settings.file_config())
    except ConfigError as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith("RCA_") else f"RCA_CONFIG_FILE: {message}") from None
    return settings


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings, read once."""
    return load_settings()
