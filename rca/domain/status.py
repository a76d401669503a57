"""The states things move through. `StrEnum`s: they compare equal to, and are stored as, their
plain string values, so the database, the API and the logs read the same words."""

from __future__ import annotations

from enum import StrEnum


class AlertStatus(StrEnum):
    """An alert, and the incident of its group, as Alertmanager reports them."""

    FIRING = "firing"
    RESOLVED = "resolved"


class InvestigationStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class DeliveryStatus(StrEnum):
    """An incident's Slack message: the state of bringing it up to date."""

    PENDING = "pending"
    RETRYING = "retrying"
    DELIVERED = "delivered"
    FAILED = "failed"


class FindingStatus(StrEnum):
    BREACHED = "breached"
    OK = "ok"
    UNAVAILABLE = "unavailable"  # no series, or the query failed
    NOT_MEASURABLE = "not_measurable"  # the serving stack exports nothing this signal could use


MEASURED = frozenset({FindingStatus.BREACHED, FindingStatus.OK})


class Analyst(StrEnum):
    """Who wrote an investigation's hypotheses."""

    LLM = "llm"
    RULES = "rules"
