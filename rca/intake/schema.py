"""Alertmanager's webhook payload, version 4.

The shape is Alertmanager's `notify/webhook.Message` (template.Data plus version, groupKey and
truncatedAlerts): https://prometheus.io/docs/alerting/latest/configuration/#webhook_config
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

from rca.domain.clock import in_utc

# Alertmanager writes Go's zero time for an alert that has not ended.
GO_ZERO_TIME_YEAR = 1


class WebhookAlert(BaseModel):
    model_config = ConfigDict(extra="allow")

    status: Literal["firing", "resolved"]
    labels: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: AwareDatetime
    endsAt: AwareDatetime | None = None
    generatorURL: str = ""
    fingerprint: str = Field(min_length=1, max_length=64)

    @field_validator("endsAt", mode="after")
    @classmethod
    def _zero_time_is_none(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.year <= GO_ZERO_TIME_YEAR:
            return None
        return in_utc(value) if value is not None else None

    @field_validator("startsAt", mode="after")
    @classmethod
    def _representable(cls, value: datetime) -> datetime:
        return in_utc(value)

    @property
    def alertname(self) -> str | None:
        return self.labels.get("alertname")


class WebhookPayload(BaseModel):
    model_config = ConfigDict(extra="allow")

    version: Literal["4"]
    groupKey: str = Field(min_length=1)
    truncatedAlerts: int = Field(default=0, ge=0)
    status: Literal["firing", "resolved"]
    receiver: str
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""
    alerts: list[WebhookAlert] = Field(min_length=1)

    def title(self) -> str:
        """A short human title: the alert name(s) and the group's distinguishing labels."""
        names = sorted({a.alertname for a in self.alerts if a.alertname})
        name = ", ".join(names) or "alert group"
        scope = " ".join(f"{k}={v}" for k, v in sorted(self.groupLabels.items()) if k != "alertname")
        summary = self.commonAnnotations.get("summary")
        parts = [name] + ([scope] if scope else []) + ([f"- {summary}"] if summary else [])
        return " ".join(parts)[:500]
