"""SQLAlchemy tables: incidents, the notifications and alerts in them, investigations, findings
and hypotheses. The schema itself is created only by the Alembic migrations in `migrations/`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from rca.domain.clock import in_utc, utcnow
from rca.domain.text import storable, storable_data


class StorableText(TypeDecorator):
    """`Text`, with what no backend stores (NUL, lone surrogates) cleaned out of every value
    written or compared (`rca.domain.text`): a reply or label we did not write never fails a write."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
        return storable(value) if isinstance(value, str) else value


class StorableString(TypeDecorator):
    """`String(length)`, cleaned as `StorableText` is."""

    impl = String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
        return storable(value) if isinstance(value, str) else value


class StorableJSON(TypeDecorator):
    """JSON (JSONB on PostgreSQL), every string and key in it cleaned as `StorableText` cleans."""

    impl = JSON().with_variant(JSONB(), "postgresql")
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return storable_data(value)


JSONType = StorableJSON()
# Column sizes that intake checks before it writes (rca/intake/schema.py), so that a longer value
# is a 422 naming the field rather than a database error.
NAME_CHARS = 255  # alert names and receivers
FINGERPRINT_CHARS = 64


class UTCDateTime(TypeDecorator):
    """Timezone-aware UTC datetimes on every backend (SQLite drops the zone on its own)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTCDateTime column")
        return in_utc(value)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


def _unique_group_key_where(name: str, where: str) -> Index:
    """A unique index on incidents' group keys, over the rows where `where` holds (a partial index)."""
    return Index(name, "group_key", unique=True, postgresql_where=text(where), sqlite_where=text(where))


class IncidentRow(Base):
    """One Alertmanager alert group while it is open."""

    __tablename__ = "incidents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_key: Mapped[str] = mapped_column(StorableText, index=True)  # the group's latest incident, open or not
    status: Mapped[str] = mapped_column(StorableString(16))  # firing | resolved
    title: Mapped[str] = mapped_column(StorableText)
    alertname: Mapped[str | None] = mapped_column(StorableString(NAME_CHARS), index=True)
    receiver: Mapped[str] = mapped_column(StorableString(NAME_CHARS))
    group_labels: Mapped[dict[str, str]] = mapped_column(JSONType)
    common_labels: Mapped[dict[str, str]] = mapped_column(JSONType)
    common_annotations: Mapped[dict[str, str]] = mapped_column(JSONType)
    external_url: Mapped[str | None] = mapped_column(StorableText)
    notification_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Slack notices owed (rca/store/notices.py): bumped by the transaction that gives Slack something
    # new to say (an investigation finished, the incident resolved); `slack_owed_since` is set while
    # Slack is behind that count and cleared by the delivery that brings it up to date.
    slack_owed: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    slack_owed_since: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    # Who opened it: "alertmanager" (a webhook), "early_warning" (the fleet scan, rca/scan) or
    # "backtest" (a warning of the scan's replay over history, `rca backtest --store`).
    origin: Mapped[str] = mapped_column(StorableString(16), default="alertmanager", server_default="alertmanager")

    alerts: Mapped[list[AlertRow]] = relationship(back_populates="incident", order_by="AlertRow.id")
    investigations: Mapped[list[InvestigationRow]] = relationship(
        back_populates="incident", order_by="InvestigationRow.id"
    )
    slack_delivery: Mapped[SlackDeliveryRow | None] = relationship(viewonly=True)

    __table_args__ = (
        # At most one open incident per alert group; a resolved group may open a new one later.
        _unique_group_key_where("uq_incidents_open_group_key", "status = 'firing'"),
        # A backtest's episode is stored once, even by two `rca backtest --store` at the same moment.
        _unique_group_key_where("uq_incidents_backtest_group_key", "origin = 'backtest'"),
    )


class NotificationRow(Base):
    """Every accepted webhook body, verbatim, for audit and replay."""

    __tablename__ = "notifications"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id", ondelete="CASCADE"), index=True)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    status: Mapped[str] = mapped_column(StorableString(16))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONType)


class AlertRow(Base):
    """One alert (by fingerprint) within an incident, with its latest raw form."""

    __tablename__ = "alerts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id", ondelete="CASCADE"), index=True)
    # Indexed for intake's question "does this alert already belong to an early warning?"
    fingerprint: Mapped[str] = mapped_column(StorableString(FINGERPRINT_CHARS), index=True)
    alertname: Mapped[str | None] = mapped_column(StorableString(NAME_CHARS))
    status: Mapped[str] = mapped_column(StorableString(16))
    labels: Mapped[dict[str, str]] = mapped_column(JSONType)
    annotations: Mapped[dict[str, str]] = mapped_column(JSONType)
    starts_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ends_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    generator_url: Mapped[str | None] = mapped_column(StorableText)
    raw: Mapped[dict[str, Any]] = mapped_column(JSONType)
    first_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    incident: Mapped[IncidentRow] = relationship(back_populates="alerts")

    __table_args__ = (UniqueConstraint("incident_id", "fingerprint", name="uq_alerts_incident_fingerprint"),)


class InvestigationRow(Base):
    """One run of the pipeline over an incident: when, how long, and how it ended."""

    __tablename__ = "investigations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id", ondelete="CASCADE"), index=True)
    # queued | running | done | inconclusive (no evidence could be read, no cause ranked) | failed
    status: Mapped[str] = mapped_column(StorableString(16), index=True)
    reason: Mapped[str] = mapped_column(StorableString(32))  # why it was queued
    requested_by: Mapped[str | None] = mapped_column(StorableString(128))  # the token that asked (reason `requested`)
    # A fleet incident's host (rca.domain.hosts): NULL investigates the incident as one target. The
    # investigations queued together share `round_id`, the id of the round's first; `round_skipped`
    # counts the hosts its alerts named beyond RCA_FLEET_MAX_HOSTS, not investigated.
    host: Mapped[str | None] = mapped_column(StorableString(255))
    round_id: Mapped[int | None] = mapped_column(Integer, index=True)
    round_skipped: Mapped[int | None] = mapped_column(Integer)
    # On a round's first: what its affected hosts share that their healthy peers lack
    # (rca.domain.factor.CommonFactor.to_dict), judged once for the round; NULL on any other.
    common_factor: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # Why an inconclusive one read nothing: no_prometheus | prometheus_unreachable | no_data (rca.domain.coverage).
    inconclusive_reason: Mapped[str | None] = mapped_column(StorableString(32))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    queued_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # While running: the claim's lease, renewed by the worker running it (rca/jobs/runner.py).
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    collect_seconds: Mapped[float | None] = mapped_column(Float)
    total_seconds: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(StorableText)
    analyst: Mapped[str | None] = mapped_column(StorableString(64))
    window_start: Mapped[datetime | None] = mapped_column(UTCDateTime)
    window_end: Mapped[datetime | None] = mapped_column(UTCDateTime)
    step_seconds: Mapped[int | None] = mapped_column(Integer)
    target: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # The analyst's accounting (rca/analyst): who wrote the hypotheses, at what cost, and why not the LLM.
    llm_model: Mapped[str | None] = mapped_column(StorableString(255))
    llm_output_mode: Mapped[str | None] = mapped_column(StorableString(16))
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    prompt_tokens_estimate: Mapped[int | None] = mapped_column(Integer)
    llm_latency_seconds: Mapped[float | None] = mapped_column(Float)
    estimated_cost: Mapped[float | None] = mapped_column(Float)
    fallback_reason: Mapped[str | None] = mapped_column(StorableText)
    disagreement: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    answer_key: Mapped[str | None] = mapped_column(StorableString(64), index=True)  # the LLM answer cache's key
    change_key: Mapped[str | None] = mapped_column(
        StorableString(64)
    )  # what Slack shows of it (rca.pipeline.change_key)
    cached_from: Mapped[int | None] = mapped_column(Integer)  # investigation whose LLM answer was reused
    prompt_trimmed: Mapped[list[str] | None] = mapped_column(JSONType)
    llm_dropped: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONType)
    llm_exchange: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONType)  # exact prompts, raw responses

    incident: Mapped[IncidentRow] = relationship(back_populates="investigations")
    findings: Mapped[list[FindingRow]] = relationship(
        back_populates="investigation", order_by="FindingRow.id", cascade="all, delete-orphan"
    )
    hypotheses: Mapped[list[HypothesisRow]] = relationship(
        back_populates="investigation", order_by="HypothesisRow.rank", cascade="all, delete-orphan"
    )


class FindingRow(Base):
    """What one check concluded from one signal's data."""

    __tablename__ = "findings"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    investigation_id: Mapped[int] = mapped_column(ForeignKey("investigations.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(StorableString(64))
    kind: Mapped[str] = mapped_column(StorableString(16))  # signal | supporting | trace
    title: Mapped[str] = mapped_column(StorableText)
    status: Mapped[str] = mapped_column(StorableString(16))  # breached | ok | unavailable | not_measurable
    breached: Mapped[bool] = mapped_column(default=False)
    value: Mapped[float | None] = mapped_column(Float)
    baseline: Mapped[float | None] = mapped_column(Float)
    threshold: Mapped[float | None] = mapped_column(Float)
    comparison: Mapped[str] = mapped_column(StorableString(2))
    unit: Mapped[str] = mapped_column(StorableString(16))
    onset: Mapped[datetime | None] = mapped_column(UTCDateTime)
    query: Mapped[str | None] = mapped_column(StorableText)
    source: Mapped[str | None] = mapped_column(StorableText)
    series_labels: Mapped[dict[str, str] | None] = mapped_column(JSONType)
    detail: Mapped[str] = mapped_column(StorableText, default="")

    investigation: Mapped[InvestigationRow] = relationship(back_populates="findings")

    __table_args__ = (UniqueConstraint("investigation_id", "key", name="uq_findings_investigation_key"),)


class HypothesisRow(Base):
    """One ranked root cause, pointing at the findings that support it."""

    __tablename__ = "hypotheses"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    investigation_id: Mapped[int] = mapped_column(ForeignKey("investigations.id", ondelete="CASCADE"), index=True)
    rank: Mapped[int] = mapped_column(Integer)
    category: Mapped[str] = mapped_column(StorableString(64), index=True)
    title: Mapped[str] = mapped_column(StorableText)
    confidence: Mapped[float] = mapped_column(Float)
    evidence: Mapped[list[str]] = mapped_column(JSONType)
    contradicting: Mapped[list[str]] = mapped_column(JSONType)
    next_steps: Mapped[list[str]] = mapped_column(JSONType)
    explanation: Mapped[str] = mapped_column(StorableText, default="")
    analyst: Mapped[str] = mapped_column(StorableString(64))

    investigation: Mapped[InvestigationRow] = relationship(back_populates="hypotheses")

    __table_args__ = (UniqueConstraint("investigation_id", "rank", name="uq_hypotheses_investigation_rank"),)


class SlackDeliveryRow(Base):
    """The one Slack message of an incident: where it is, what evidence it shows, how delivery went.

    Keyed (unique) on the incident, and locked while a delivery runs, so that a redelivered or
    concurrent task sees what the first one did instead of posting again.
    """

    __tablename__ = "slack_deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id", ondelete="CASCADE"))
    mode: Mapped[str] = mapped_column(StorableString(16))  # webhook | bot
    channel: Mapped[str | None] = mapped_column(StorableString(255))
    ts: Mapped[str | None] = mapped_column(StorableString(32))  # Slack's id of the message (bot mode)
    status: Mapped[str] = mapped_column(StorableString(16))  # pending | retrying | delivered | failed
    fingerprint: Mapped[str | None] = mapped_column(StorableString(64))  # evidence shown in the message
    thread_fingerprint: Mapped[str | None] = mapped_column(StorableString(64))  # evidence last announced
    messages: Mapped[int] = mapped_column(Integer, default=0)  # messages and thread replies posted
    updates: Mapped[int] = mapped_column(Integer, default=0)  # chat.update calls that succeeded
    resolved_notified_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(StorableText)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    attempts: Mapped[list[SlackAttemptRow]] = relationship(
        back_populates="delivery", order_by="SlackAttemptRow.id", cascade="all, delete-orphan"
    )

    __table_args__ = (UniqueConstraint("incident_id", name="uq_slack_deliveries_incident"),)


class SlackAttemptRow(Base):
    """One HTTP call to Slack and how it ended, for the incident's delivery history."""

    __tablename__ = "slack_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    delivery_id: Mapped[int] = mapped_column(ForeignKey("slack_deliveries.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    event: Mapped[str] = mapped_column(StorableString(16))  # investigation | resolved
    action: Mapped[str] = mapped_column(StorableString(16))  # post | update | reply
    outcome: Mapped[str] = mapped_column(StorableString(16))  # ok | rate_limited | retry | failed
    http_status: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(StorableText)
    retry_after: Mapped[float | None] = mapped_column(Float)

    delivery: Mapped[SlackDeliveryRow] = relationship(back_populates="attempts")


class SlackSendRow(Base):
    """A message the service was about to post to Slack, committed before the call with the key
    that the message carries in its metadata (bot mode; an incoming webhook's carries none):
    "sending". `outcome` stays empty until Slack's answer is recorded ("posted", with its ts), so
    an empty one after a lost commit means "look in the channel before posting again", or for a
    webhook "post again, at least once" (rca/notify/once.py).

    It refers to the incident, not to the delivery row: it is written while the delivery holds that
    row locked, from a transaction of its own."""

    __tablename__ = "slack_sends"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(StorableString(36))  # a uuid4, sent as the message's metadata
    action: Mapped[str] = mapped_column(StorableString(16))  # post | reply
    channel: Mapped[str] = mapped_column(StorableString(255))  # as asked: a name or an ID
    thread_ts: Mapped[str | None] = mapped_column(StorableString(32))  # the parent, for a reply
    at: Mapped[datetime] = mapped_column(UTCDateTime)  # recorded, just before the call
    # None: unknown (Slack may have it) | posted | found | not_sent | absent | unverified
    outcome: Mapped[str | None] = mapped_column(StorableString(16))
    channel_id: Mapped[str | None] = mapped_column(StorableString(255))
    ts: Mapped[str | None] = mapped_column(StorableString(32))

    __table_args__ = (UniqueConstraint("key", name="uq_slack_sends_key"),)


class IncidentDigestRow(Base):
    """What history search and similarity read about one incident, flattened into one row so that
    a query at a million incidents touches one table: the full-text document, the alert labels,
    the evidence signature of the latest finished investigation and the confirmed cause.
    Rewritten by `rca.store.digests.refresh` whenever any of its sources changes."""

    __tablename__ = "incident_digests"

    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id", ondelete="CASCADE"), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    status: Mapped[str] = mapped_column(StorableString(16))
    document: Mapped[str] = mapped_column(StorableText)
    labels: Mapped[list[str]] = mapped_column(JSONType)  # "name=value" of every alert label
    breached: Mapped[list[str]] = mapped_column(JSONType)  # sorted breached finding keys
    breached_key: Mapped[str | None] = mapped_column(StorableString(40))  # hash of `breached`, for exact matches
    onset_order: Mapped[list[str]] = mapped_column(JSONType)
    stack: Mapped[str | None] = mapped_column(StorableString(64))
    categories: Mapped[list[str]] = mapped_column(JSONType)  # top three hypotheses, best first
    top_category: Mapped[str | None] = mapped_column(StorableString(64))
    top_confidence: Mapped[float | None] = mapped_column(Float)
    analyst: Mapped[str | None] = mapped_column(StorableString(64))
    confirmed_category: Mapped[str | None] = mapped_column(StorableString(64))

    __table_args__ = (
        Index("ix_incident_digests_created", "created_at", "incident_id"),
        Index("ix_incident_digests_status_created", "status", "created_at", "incident_id"),
        Index("ix_incident_digests_top_category", "top_category", "created_at"),
        Index("ix_incident_digests_breached_key", "breached_key", "created_at"),
        Index("ix_incident_digests_confirmed", "confirmed_category", "created_at"),
    )


class FeedbackRow(Base):
    """An engineer's verdict on an incident: the confirmed cause and which hypotheses were right.
    The newest one per incident is the one that counts."""

    __tablename__ = "feedback"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id", ondelete="CASCADE"), index=True)
    investigation_id: Mapped[int | None] = mapped_column(ForeignKey("investigations.id", ondelete="SET NULL"))
    category: Mapped[str] = mapped_column(StorableString(64))
    note: Mapped[str] = mapped_column(StorableText)
    verdicts: Mapped[list[dict[str, Any]]] = mapped_column(JSONType)  # [{"rank": 1, "correct": false}]
    author: Mapped[str] = mapped_column(StorableString(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ApiTokenRow(Base):
    """A named API token created by `rca token create`; only the SHA-256 of the secret is kept."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(StorableString(128))
    token_hash: Mapped[str] = mapped_column(StorableString(64))
    scopes: Mapped[list[str]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        UniqueConstraint("name", name="uq_api_tokens_name"),
        UniqueConstraint("token_hash", name="uq_api_tokens_token_hash"),
    )


class ScanTargetRow(Base):
    """The fleet scan's state of one serving instance (rca/scan/states.py), written on each transition."""

    __tablename__ = "scan_targets"

    instance: Mapped[str] = mapped_column(StorableString(255), primary_key=True)
    host: Mapped[str] = mapped_column(StorableString(255))
    state: Mapped[str] = mapped_column(StorableString(16))  # ok | watch | warning | cleared
    since: Mapped[datetime] = mapped_column(UTCDateTime)
    # The early-warning incident, while the instance is in warning or cleared (at most one per instance).
    incident_id: Mapped[int | None] = mapped_column(ForeignKey("incidents.id", ondelete="SET NULL"))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # The TTFT SLO the scan judges it against and where that came from (rca/scan/slo_rules.py: "rule
    # <alert> (group <group>, <file>)", "config file" or "default"), as of its last change.
    slo_ttft_seconds: Mapped[float | None] = mapped_column(Float)
    slo_source: Mapped[str | None] = mapped_column(StorableText)


class ScanTransitionRow(Base):
    """One change of a serving instance's scan state, with the reason and the figures behind it."""

    __tablename__ = "scan_transitions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance: Mapped[str] = mapped_column(StorableString(255), index=True)
    before: Mapped[str] = mapped_column(StorableString(16))
    after: Mapped[str] = mapped_column(StorableString(16))
    at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    reason: Mapped[str] = mapped_column(StorableText)
    figures: Mapped[dict[str, Any]] = mapped_column(JSONType)
    incident_id: Mapped[int | None] = mapped_column(ForeignKey("incidents.id", ondelete="SET NULL"), index=True)


class EvidenceSeriesRow(Base):
    """A finding's series, downsampled and kept with its investigation (rca.domain.series bounds
    the size), so that the incident page draws it without Prometheus."""

    __tablename__ = "evidence_series"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    investigation_id: Mapped[int] = mapped_column(ForeignKey("investigations.id", ondelete="CASCADE"), index=True)
    finding_key: Mapped[str] = mapped_column(StorableString(64))
    labels: Mapped[dict[str, str]] = mapped_column(JSONType)
    start: Mapped[datetime] = mapped_column(UTCDateTime)
    step_seconds: Mapped[int] = mapped_column(Integer)
    values: Mapped[list[float | None]] = mapped_column(JSONType)  # values[i] at start + i * step_seconds
    baseline_end: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (UniqueConstraint("investigation_id", "finding_key", name="uq_evidence_series_finding"),)
