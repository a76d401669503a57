"""What a Slack message says about an incident, as plain data, and its change key.

`IncidentMessage` is the only input of `blocks.render`: it is built from stored rows here and
holds raw (unescaped) text; escaping happens once, in `blocks`. Keeping it plain data lets tests
and other analysts (the LLM writes `model`, `tokens`, `cost_usd`) fill it without the database.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

from rca.domain import early_warning
from rca.domain.coverage import DataGap, data_gap
from rca.domain.fleet import FleetSummary, count, host_list
from rca.domain.result import change_key
from rca.domain.status import AlertStatus, InvestigationStatus
from rca.store.models import IncidentRow, InvestigationRow
from rca.store.rounds import FleetRound
from rca.store.similar import Precedent


@dataclass(frozen=True)
class HypothesisLine:
    category: str
    confidence: float
    why: str  # one line: the hypothesis title, or the first sentence of its explanation


@dataclass(frozen=True)
class BreachedLine:
    key: str
    title: str
    baseline: float | None
    value: float | None
    unit: str
    comparison: str
    threshold: float | None


@dataclass(frozen=True)
class IncidentMessage:
    incident_id: int
    alertname: str
    subject: str  # the investigated target in a few words: its instance, else its host
    status: str  # firing | resolved
    severity: str | None = None
    summary: str | None = None
    hypotheses: list[HypothesisLine] = field(default_factory=list)
    breached: list[BreachedLine] = field(default_factory=list)
    incident_url: str | None = None
    generator_url: str | None = None
    external_url: str | None = None
    analyst: str | None = None  # who wrote the hypotheses: "llm" or "rules" (rca.domain.status.Analyst)
    seconds: float | None = None
    model: str | None = None  # the LLM asked, whether or not its answer was used
    fallback_reason: str | None = None  # why the rules answered although a model was asked
    data_gap: DataGap | None = None  # what the investigation could not see (rca.domain.coverage)
    tokens: int | None = None  # None when unknown (the rules analyst spends none)
    cost_usd: float | None = None
    precedent: Precedent | None = None  # the past incident most like this one ("Last time")
    precedent_url: str | None = None
    failure: str | None = None  # why the investigation failed, when it did (there is no answer then)
    investigation_id: int | None = None  # the investigation shown, which the buttons' values name
    causes: list[str] = field(default_factory=list)  # the taxonomy's causes, for "Pick another cause"
    confirmed: Confirmed | None = None  # the incident's newest feedback
    asked_by: str | None = None  # who asked for the investigation queued or running now, if anyone did
    # A fleet incident's latest round, its hosts grouped by cause (rca.domain.fleet): shown instead
    # of one host's causes and breached signals, which are then empty.
    fleet: FleetSummary | None = None

    @property
    def verdicts(self) -> str:
        """What people said and asked, as the message shows it: part of what an update must change."""
        said = f"confirmed:{self.confirmed.author}:{self.confirmed.cause}" if self.confirmed else ""
        return f"{said}|asked:{self.asked_by}" if self.asked_by else said


@dataclass(frozen=True)
class Confirmed:
    author: str
    cause: str


def _why(title: str, explanation: str) -> str:
    first = explanation.strip().split(". ")[0].strip()
    return first or title


def _subject(incident: IncidentRow, investigation: InvestigationRow) -> str:
    target = investigation.target or {}
    labels = incident.common_labels or {}
    return target.get("instance") or target.get("host") or labels.get("instance") or "unknown target"


def incident_labels(incident: IncidentRow) -> dict[str, str]:
    """The labels routing sees: the group's common labels over the first firing alert's."""
    firing = [a for a in incident.alerts if a.status == AlertStatus.FIRING] or list(incident.alerts)
    return {**(firing[0].labels if firing else {}), **(incident.common_labels or {})}


def _summary(incident: IncidentRow, annotations: dict[str, str]) -> str | None:
    """The alert's summary; for an early warning, the scan's (signals, since when, forecast) and
    how long before the SLA alert it came, once one joined."""
    summary = annotations.get("summary") or annotations.get("description")
    if incident.origin != early_warning.ORIGIN:
        return summary
    sla = [a for a in incident.alerts if a.alertname != early_warning.ALERTNAME]
    if not sla:
        return summary
    first = min(sla, key=lambda a: a.starts_at)
    when = early_warning.lead(first.starts_at, incident.created_at)
    return f"{summary}. SLA alert {first.alertname} fired {when} the early warning"


def from_incident(
    incident: IncidentRow,
    investigation: InvestigationRow,
    public_url: str | None,
    precedent: Precedent | None = None,
    fleet: FleetRound | None = None,
) -> IncidentMessage:
    """The message for an incident and its latest finished investigation (and the past incident
    most like it, when one is alike enough to cite); for a fleet incident, its round's summary
    (`fleet`) in place of one host's answer."""
    if fleet is not None:
        return _fleet_message(from_incident(incident, investigation, public_url, precedent), fleet)
    labels = incident_labels(incident)
    failed = investigation.status == InvestigationStatus.FAILED
    annotations = {**next((a.annotations for a in incident.alerts), {}), **(incident.common_annotations or {})}
    return IncidentMessage(
        incident_id=incident.id,
        alertname=incident.alertname or incident.title,
        subject=_subject(incident, investigation),
        status=incident.status,
        severity=labels.get("severity"),
        summary=_summary(incident, annotations),
        hypotheses=[
            HypothesisLine(h.category, h.confidence, _why(h.title, h.explanation)) for h in investigation.hypotheses
        ],
        breached=[
            BreachedLine(f.key, f.title, f.baseline, f.value, f.unit, f.comparison, f.threshold)
            for f in investigation.findings
            if f.breached
        ],
        incident_url=f"{public_url}/incidents/{incident.id}" if public_url else None,
        generator_url=next((a.generator_url for a in incident.alerts if a.generator_url), None),
        external_url=incident.external_url,
        analyst=investigation.analyst,
        seconds=investigation.total_seconds,
        model=investigation.llm_model,
        fallback_reason=investigation.fallback_reason,
        data_gap=None if failed else _data_gap(investigation),
        tokens=_tokens(investigation),
        cost_usd=investigation.estimated_cost,
        precedent=precedent,
        precedent_url=f"{public_url}/incidents/{precedent.incident_id}" if precedent and public_url else None,
        failure=(investigation.error or "unknown error") if failed else None,
        investigation_id=investigation.id,
    )


def _fleet_message(one: IncidentMessage, fleet: FleetRound) -> IncidentMessage:
    """The message of a fleet incident: its hosts by cause, its time the longest host's, its
    tokens and cost all hosts' together; no single host's causes, signals, gap or failure."""
    rows = fleet.investigations
    hosts = [row.host or "" for row in rows]
    tokens = [t for row in rows if (t := _tokens(row)) is not None]
    costs = [row.estimated_cost for row in rows if row.estimated_cost is not None]
    skipped = f" of {len(hosts) + fleet.summary.skipped}" if fleet.summary.skipped else ""
    return replace(
        one,
        subject=f"{count(len(hosts))}{skipped} ({host_list(hosts)})",
        hypotheses=[],
        breached=[],
        data_gap=None,
        failure=None,
        seconds=max((row.total_seconds for row in rows if row.total_seconds is not None), default=None),
        tokens=sum(tokens) if tokens else None,
        cost_usd=sum(costs) if costs else None,
        fleet=fleet.summary,
    )


def _data_gap(investigation: InvestigationRow) -> DataGap | None:
    if not investigation.findings and not investigation.error:
        return None  # nothing was judged at all: not an investigation of the pipeline
    return data_gap(investigation.findings, investigation.error)


def _tokens(investigation: InvestigationRow) -> int | None:
    counts = [investigation.prompt_tokens, investigation.completion_tokens]
    return sum(c for c in counts if c is not None) if any(c is not None for c in counts) else None


def change_key_of(investigation: InvestigationRow) -> str:
    """What the message shows, as the pipeline keyed it when it finished the investigation.
    Investigations finished before migration 0007 have no key: theirs is taken from the stored
    findings and hypotheses (the analyst's ranking, which equals the rules' unless an LLM wrote it)."""
    if investigation.change_key:
        return investigation.change_key
    return change_key(list(investigation.findings), [h.category for h in investigation.hypotheses])


def fleet_change_key(fleet: FleetRound) -> str:
    """What a fleet incident's message shows: each host's status and its own change key, and
    the common factor's words when it was judged."""
    shown = sorted(f"{row.host}:{row.status}:{change_key_of(row)}" for row in fleet.investigations)
    if fleet.summary.common_factor is not None:
        shown.append(fleet.summary.common_factor.line())
    return hashlib.sha256("\n".join(shown).encode()).hexdigest()
