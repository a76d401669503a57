"""Alertmanager's webhook payload, version 4.

The shape is Alertmanager's `notify/webhook.Message` (template.Data plus version, groupKey and
truncatedAlerts): https://prometheus.io/docs/alerting/latest/configuration/#webhook_config

Beyond the shape, the schema refuses what would parse but could never be stored or investigated,
each as an error at the field: an alert name or receiver longer than its column, a time outside
[2000, 2200) (the investigation window reaches back from startsAt; year 1 overflowed it), and,
when `IntakeLimits` come as validation context (rca/intake/limits.py), more alerts, labels or
longer names, values or group key than the settings allow. Sizes are checked before the items
themselves are validated, so an oversized payload costs little.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from rca.domain.clock import in_utc, iso_datetime
from rca.intake import limits
from rca.store.models import FINGERPRINT_CHARS, NAME_CHARS

# Alertmanager writes Go's zero time for an alert that has not ended.
GO_ZERO_TIME_YEAR = 1
# Alert times outside this range are refused: no Prometheus has data before it, and the
# investigation's window arithmetic must never leave datetime's range.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)
OVER_LIMIT = "limit_exceeded"


def _shown(text: str, width: int = 40) -> str:
    """A refused name, short enough to quote in a message."""
    return repr(text if len(text) <= width else text[:width] + "…")


def _in_range(value: datetime) -> datetime:
    value = in_utc(value)
    if not EARLIEST <= value < LATEST:
        raise PydanticCustomError(
            "datetime_out_of_range",
            "time out of range: it must lie from {earliest} up to {latest}",
            {"earliest": f"{EARLIEST:%Y-%m-%d}", "latest": f"{LATEST:%Y-%m-%d}"},
        )
    return value


def _check_map(value: Any, info: ValidationInfo, kind: Literal["label", "annotation"]) -> Any:
    """Sizes of one label or annotation map, before its entries are validated one by one."""
    if not isinstance(value, dict):
        return value  # the type check that follows says what is wrong
    name = value.get("alertname") if kind == "label" else None
    if isinstance(name, str) and len(name) > NAME_CHARS:
        raise PydanticCustomError(
            "string_too_long",
            "the alertname label has {actual} characters; at most {max_length} can be stored",
            {"actual": len(name), "max_length": NAME_CHARS},
        )
    given = limits.of(info.context)
    if given is None:
        return value
    if len(value) > given.max_labels:
        raise PydanticCustomError(
            OVER_LIMIT,
            "{count} {kind}s, over RCA_WEBHOOK_MAX_LABELS={limit}",
            {"count": len(value), "kind": kind, "limit": given.max_labels},
        )
    if kind == "label":
        value_limit, setting = given.max_label_value_chars, "RCA_WEBHOOK_MAX_LABEL_VALUE_CHARS"
    else:
        value_limit, setting = given.max_annotation_value_chars, "RCA_WEBHOOK_MAX_ANNOTATION_VALUE_CHARS"
    for key, item in value.items():
        if isinstance(key, str) and len(key) > given.max_name_chars:
            raise PydanticCustomError(
                OVER_LIMIT,
                "{kind} name {name} has {actual} characters, over RCA_WEBHOOK_MAX_NAME_CHARS={limit}",
                {"kind": kind, "name": _shown(key), "actual": len(key), "limit": given.max_name_chars},
            )
        if isinstance(item, str) and len(item) > value_limit:
            raise PydanticCustomError(
                OVER_LIMIT,
                "the value of {kind} {name} has {actual} characters, over {setting}={limit}",
                {"kind": kind, "name": _shown(key), "actual": len(item), "setting": setting, "limit": value_limit},
            )
    return value


def _check_labels(value: Any, info: ValidationInfo) -> Any:
    return _check_map(value, info, "label")


def _check_annotations(value: Any, info: ValidationInfo) -> Any:
    return _check_map(value, info, "annotation")


Labels = Annotated[dict[str, str], BeforeValidator(_check_labels)]
Annotations = Annotated[dict[str, str], BeforeValidator(_check_annotations)]


class WebhookAlert(BaseModel):
    model_config = ConfigDict(extra="allow")

    status: Literal["firing", "resolved"]
    labels: Labels
    annotations: Annotations = Field(default_factory=dict)
    startsAt: Annotated[AwareDatetime, BeforeValidator(iso_datetime)]
    endsAt: Annotated[AwareDatetime | None, BeforeValidator(iso_datetime)] = None
    generatorURL: str = ""
    fingerprint: str = Field(min_length=1, max_length=FINGERPRINT_CHARS)

    @field_validator("endsAt", mode="after")
    @classmethod
    def _zero_time_is_none(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.year <= GO_ZERO_TIME_YEAR:
            return None
        return _in_range(value) if value is not None else None

    @field_validator("startsAt", mode="after")
    @classmethod
    def _representable(cls, value: datetime) -> datetime:
        return _in_range(value)

    @property
    def alertname(self) -> str | None:
        return self.labels.get("alertname")


class WebhookPayload(BaseModel):
    model_config = ConfigDict(extra="allow")

    version: Literal["4"]
    groupKey: str = Field(min_length=1)
    truncatedAlerts: int = Field(default=0, ge=0, strict=True)  # a count: `false` is no count
    status: Literal["firing", "resolved"]
    receiver: str = Field(max_length=NAME_CHARS)
    groupLabels: Labels = Field(default_factory=dict)
    commonLabels: Labels = Field(default_factory=dict)
    commonAnnotations: Annotations = Field(default_factory=dict)
    externalURL: str = ""
    alerts: list[WebhookAlert] = Field(min_length=1)

    @field_validator("groupKey", mode="after")
    @classmethod
    def _group_key_size(cls, value: str, info: ValidationInfo) -> str:
        given = limits.of(info.context)
        size = len(value.encode("utf-8", "surrogatepass"))
        if given is not None and size > given.max_group_key_bytes:
            raise PydanticCustomError(
                OVER_LIMIT,
                "groupKey has {size} bytes, over RCA_WEBHOOK_MAX_GROUP_KEY_BYTES={limit}; Alertmanager builds it "
                "from the route's matchers and group_by labels",
                {"size": size, "limit": given.max_group_key_bytes},
            )
        return value

    @field_validator("alerts", mode="before")
    @classmethod
    def _alert_count(cls, value: Any, info: ValidationInfo) -> Any:
        given = limits.of(info.context)
        if given is not None and isinstance(value, list) and len(value) > given.max_alerts:
            raise PydanticCustomError(
                OVER_LIMIT,
                "{count} alerts, over RCA_WEBHOOK_MAX_ALERTS={limit}; set max_alerts: {limit} in Alertmanager's "
                "webhook_config, and it sends the first ones and counts the rest in truncatedAlerts",
                {"count": len(value), "limit": given.max_alerts},
            )
        return value

    def title(self) -> str:
        """A short human title: the alert name(s) and the group's distinguishing labels."""
        names = sorted({a.alertname for a in self.alerts if a.alertname})
        name = ", ".join(names) or "alert group"
        scope = " ".join(f"{k}={v}" for k, v in sorted(self.groupLabels.items()) if k != "alertname")
        summary = self.commonAnnotations.get("summary")
        parts = [name] + ([scope] if scope else []) + ([f"- {summary}"] if summary else [])
        return " ".join(parts)[:500]
