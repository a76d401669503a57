"""Response shapes of the HTTP API (also what `rca investigate --json` prints)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rca.signals.findings import onset_order


class FindingOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    kind: str
    title: str
    status: str
    breached: bool
    value: float | None
    baseline: float | None
    threshold: float | None
    comparison: str
    unit: str
    onset: datetime | None
    query: str | None
    source: str | None
    series_labels: dict[str, str] | None
    detail: str

    @classmethod
    def from_row(cls, row: Any) -> FindingOut:
        """Stored findings keep their public id in `key` (the integer id is internal)."""
        data = {name: getattr(row, name) for name in cls.model_fields if name != "id"}
        return cls(id=row.key, **data)


class HypothesisOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    rank: int
    category: str
    title: str
    confidence: float
    evidence: list[str]
    contradicting: list[str]
    next_steps: list[str]
    explanation: str
    analyst: str


class InvestigationOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    status: str
    reason: str
    attempts: int
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    collect_seconds: float | None
    total_seconds: float | None
    error: str | None
    analyst: str | None
    window_start: datetime | None
    window_end: datetime | None
    step_seconds: int | None
    target: dict[str, Any] | None
    findings: list[FindingOut]
    hypotheses: list[HypothesisOut]
    margin: float | None = Field(description="confidence of the first answer minus that of the second")
    onset_order: list[str] = Field(description="breached finding ids, earliest onset first: what moved first")
    # The analyst's accounting (docs/analyst.md); `analyst` says who wrote the hypotheses.
    llm_model: str | None = None
    llm_output_mode: str | None = Field(None, description="json_schema | json_object | prompt")
    prompt_tokens: int | None = Field(None, description="as the LLM server counted them, all calls")
    completion_tokens: int | None = None
    prompt_tokens_estimate: int | None = Field(None, description="the pre-call budget estimate")
    llm_latency_seconds: float | None = None
    estimated_cost: float | None = Field(None, description="tokens times RCA_LLM_PRICE_PER_1K_*")
    fallback_reason: str | None = Field(None, description="why the rules analyst wrote the hypotheses")
    disagreement: dict[str, Any] | None = Field(None, description="the LLM's first cause is contradicted")
    evidence_fingerprint: str | None = None
    cached_from: int | None = Field(None, description="investigation whose LLM answer was reused")
    prompt_trimmed: list[str] | None = Field(None, description="what was cut to fit the prompt budget")
    llm_dropped: list[dict[str, Any]] | None = Field(None, description="LLM hypotheses refused, with why")
    llm_exchange: list[dict[str, Any]] | None = Field(None, description="audit: exact prompts, raw responses")

    @classmethod
    def from_row(cls, row: Any) -> InvestigationOut:
        computed = ("findings", "hypotheses", "margin", "onset_order")
        data = {name: getattr(row, name) for name in cls.model_fields if name not in computed}
        hypotheses = [HypothesisOut.model_validate(h) for h in row.hypotheses]
        margin = round(hypotheses[0].confidence - hypotheses[1].confidence, 3) if len(hypotheses) > 1 else None
        return cls(**data, findings=[FindingOut.from_row(f) for f in row.findings], hypotheses=hypotheses,
                   margin=margin, onset_order=onset_order(row.findings))


class AlertOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    fingerprint: str
    alertname: str | None
    status: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: datetime
    ends_at: datetime | None
    generator_url: str | None


class IncidentSummary(BaseModel):
    id: int
    title: str
    status: str
    alertname: str | None
    created_at: datetime
    updated_at: datetime
    resolved_at: datetime | None
    notification_count: int
    investigation_status: str | None
    top_category: str | None
    top_confidence: float | None


class SlackAttemptOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    at: datetime
    event: str
    action: str
    outcome: str
    http_status: int | None
    error: str | None
    retry_after: float | None


class SlackDeliveryOut(BaseModel):
    """The incident's Slack message and every attempt to deliver it (never the token or webhook URL)."""

    model_config = ConfigDict(from_attributes=True)

    mode: str
    status: str
    channel: str | None
    ts: str | None
    messages: int
    updates: int
    resolved_notified_at: datetime | None
    last_error: str | None
    updated_at: datetime
    attempts: list[SlackAttemptOut]


class IncidentOut(BaseModel):
    id: int
    group_key: str
    title: str
    status: str
    alertname: str | None
    receiver: str
    group_labels: dict[str, str]
    common_labels: dict[str, str]
    common_annotations: dict[str, str]
    external_url: str | None
    created_at: datetime
    updated_at: datetime
    resolved_at: datetime | None
    notification_count: int
    alerts: list[AlertOut]
    investigations: list[InvestigationOut]
    investigation: InvestigationOut | None  # the latest
    slack: SlackDeliveryOut | None = None


class IncidentPage(BaseModel):
    items: list[IncidentSummary]
    total: int
    limit: int
    offset: int
    next_offset: int | None


class AcceptedOut(BaseModel):
    incident_id: int
    created: bool
    investigation_id: int | None
    enqueued: bool
