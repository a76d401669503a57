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
    DONE = "done"  # a diagnosis: ranked causes from measured evidence
    INCONCLUSIVE = "inconclusive"  # finished blind: no evidence could be read, so no cause is ranked
    FAILED = "failed"


class SlackEvent(StrEnum):
    """Why an incident's Slack message is brought up to date, as `slack_attempts.event` records it."""

    INVESTIGATION = "investigation"  # an investigation finished
    RESOLVED = "resolved"  # the incident resolved
    SWEEP = "sweep"  # the sweeper found the notice still owed and queued it again
    ACTION = "action"  # someone clicked a button of the message (confirmed a cause, asked again)


class InconclusiveReason(StrEnum):
    """Why an investigation could read no evidence (`rca.domain.coverage` decides)."""

    NO_PROMETHEUS = "no_prometheus"  # RCA_PROMETHEUS_URL is not set
    PROMETHEUS_UNREACHABLE = "prometheus_unreachable"  # it did not answer, or not as Prometheus
    NO_DATA = "no_data"  # it answered, but no signal of the target could be measured


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
