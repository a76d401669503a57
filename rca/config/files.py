"""The optional YAML config file (`RCA_CONFIG_FILE`): thresholds, profile and stack, target
labels, Slack routes and trace span groups, one model per section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from rca.config.cpus import parse_cpu_list
from rca.config.loader import load_yaml


class ScopeConfig(BaseModel):
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


class SlackRoute(BaseModel):
    """Send incidents whose labels all equal `match` to `channel` (first matching route wins)."""

    model_config = {"extra": "forbid"}

    match: dict[str, str] = Field(min_length=1, description="label name -> exact value; every pair must match")
    channel: str = Field(min_length=1, description="channel name (#sev1) or id (C0123...)")


class SlackFileConfig(BaseModel):
    """Slack channel routing by alert labels (bot-token mode; a webhook posts where it was created)."""

    model_config = {"extra": "forbid"}

    routes: list[SlackRoute] = Field(default_factory=list)
    default_channel: str | None = Field(default=None, description="when no route matches; else RCA_SLACK_CHANNEL")


DEFAULT_TRACE_GROUPS: dict[str, list[str]] = {
    # Span names (globs, case-insensitive) whose time, children included, each trace finding measures.
    # LoRA: vLLM/S-LoRA/LoRAX style adapter loads and their file I/O, compilation and injection steps.
    "trace_lora_adapter_load_share": [
        "*lora*load*",
        "*load*lora*",
        "*adapter*load*",
        "*load*adapter*",
        "lora_adapter.*",
    ],
    # Prefill: TGI's `prefill` / gRPC `.../Prefill` spans, engines' `prefill` and context-encoding spans.
    "trace_prefill_share": ["*prefill*", "*context_encod*", "*prompt_processing*"],
}


# The service name each serving stack's engine reports its traces as by default (OTLP resource
# `service.name`), tried after the alert's own labels. Read from the upstream sources:
# - TGI (3.x, router/src/main.rs and launcher/src/main.rs): `--otlp-service-name`, default
#   "text-generation-inference.router"; the Python shards report "text-generation-inference.server".
# - vLLM (v0.6 to v0.11, vllm/tracing.py): `--otlp-traces-endpoint` makes a TracerProvider with the
#   OpenTelemetry SDK's default resource, so the name is OTEL_SERVICE_NAME, which vLLM's own example
#   sets to "vllm-server" (examples/online_serving/opentelemetry/README.md); later releases name
#   the resource "vllm". ("vllm.llm_engine" is the tracer's scope, not a service.)
# - SGLang (python/sglang/srt/tracing/trace.py, `--enable-trace --otlp-traces-endpoint`):
#   process_tracing_init(endpoint, "sglang").
# - Triton (docs/user_guide/trace.md, `--trace-config opentelemetry,resource=...`): default
#   resource service.name=triton-inference-server.
DEFAULT_STACK_SERVICES: dict[str, list[str]] = {
    "tgi": ["text-generation-inference.router", "text-generation-inference.server"],
    "vllm_v1": ["vllm-server", "vllm"],
    "vllm_v0": ["vllm-server", "vllm"],
    "sglang": ["sglang"],
    "triton": ["triton-inference-server"],
}


class TracesConfig(BaseModel):
    """How an alert maps to a traced service and which span names each trace finding measures."""

    model_config = {"extra": "forbid"}

    service_labels: list[str] = Field(
        default=["service", "service_name", "app", "job", "model_name"],
        description="Alert labels that name the traced service, in order of preference.",
    )
    services: dict[str, str] = Field(
        default_factory=dict,
        description="Label value -> service name in the trace backend, when they differ.",
    )
    stack_services: dict[str, list[str]] = Field(
        default_factory=lambda: {k: list(v) for k, v in DEFAULT_STACK_SERVICES.items()},
        description="Serving stack -> the service names its engine reports traces as, tried after the alert's "
        "labels; a stack given here replaces that stack's defaults (the upstreams' own names), the others stay.",
    )
    operations: dict[str, list[str]] = Field(
        default_factory=lambda: {k: list(v) for k, v in DEFAULT_TRACE_GROUPS.items()},
        description="Trace finding key -> span-name globs; replaces the defaults as a whole.",
    )
    phase_attributes: dict[str, str] = Field(
        default_factory=lambda: {
            "gen_ai.latency.time_in_queue": "queue",
            "gen_ai.latency.time_in_model_prefill": "prefill",
            "gen_ai.latency.time_in_model_decode": "decode",
        },
        description="Span attribute (seconds) -> phase, for engines that report phases as attributes "
        "(vLLM's llm_request span); in this order they become child spans <span>:<phase>.",
    )
    share_threshold: float = Field(
        default=0.15, gt=0, lt=1, description="Share of request time above which an operation group breaches"
    )
    min_share_increase: float = Field(
        default=0.10, gt=0, lt=1, description="...and by how much its share must exceed the baseline"
    )

    @field_validator("stack_services")
    @classmethod
    def _over_the_defaults(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        empty = sorted(stack for stack, names in value.items() if not [n for n in names if n.strip()])
        if empty:
            raise ValueError(f"{', '.join(empty)}: give at least one service name")
        return {k: list(v) for k, v in DEFAULT_STACK_SERVICES.items()} | value

    @field_validator("operations")
    @classmethod
    def _check_operations(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for key, patterns in value.items():
            if not key.startswith("trace_") or not key.replace("_", "").isalnum():
                raise ValueError(f"{key!r}: trace finding keys look like trace_<name>")
            if not patterns:
                raise ValueError(f"{key!r}: give at least one span-name pattern")
        return value


class FileConfig(BaseModel):
    """The optional config file (`RCA_CONFIG_FILE`): thresholds and profile overrides."""

    model_config = {"extra": "forbid"}

    thresholds: dict[str, float] = Field(default_factory=dict)
    profile: str | None = None
    stack: str | None = Field(default=None, description="serving stack id; unset = detect from metric names")
    slo_ttft_seconds: float = Field(
        default=2.0,
        gt=0,
        allow_inf_nan=False,
        description="TTFT p95 SLO for the violation-probability model (seconds); written here, it is also the "
        "fleet scan's SLO for every serving instance, over the operator's alerting rules (rca/scan/slo_rules.py)",
    )
    slo_probability_threshold: float = Field(
        default=0.5, gt=0, le=1, description="P(SLO violation | queue depth) that breaches that finding"
    )
    pinned_cpus: str | None = Field(
        default=None,
        description="CPUs the serving engine is pinned to (`4-7,12`), for hosts without isolcpus",
    )
    process_groups: list[str] = Field(
        default=["vllm", "sglang", "text-generation", "tritonserver"],
        min_length=1,
        description="process-exporter group names of the serving engine, matched case-insensitively as substrings",
    )
    target: ScopeConfig = Field(default_factory=ScopeConfig)  # the YAML key `target`: how alerts are scoped
    slack: SlackFileConfig = Field(default_factory=SlackFileConfig)
    traces: TracesConfig = Field(default_factory=TracesConfig)

    @field_validator("process_groups")
    @classmethod
    def _check_process_groups(cls, value: list[str]) -> list[str]:
        if any(not name.strip() for name in value):
            raise ValueError("a process group name is empty")
        return value

    @field_validator("pinned_cpus", mode="before")
    @classmethod
    def _check_pinned_cpus(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # `pinned_cpus: 4` in YAML is an int
        if isinstance(value, str):
            parse_cpu_list(value)
        return value


def load_file_config(path: Path | None) -> FileConfig:
    """Read and validate the YAML config file; errors name the file and the key."""
    return FileConfig() if path is None else load_yaml(path, FileConfig, "RCA_CONFIG_FILE")
