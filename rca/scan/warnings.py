"""The scan's states kept in the database, and a warning turned into an incident.

Each scan advances every instance's state in memory (`rca.scan.states`); only transitions are
written: the instance's row in `scan_targets` and one `scan_transitions` row with the reason and
figures. An instance entering `warning` opens an incident of origin `early_warning` with one alert
(labels naming the instance, `startsAt` when its signals started to move) and a queued
investigation: the same pipeline as an Alertmanager alert (ranking, analyst, Slack, search).
`cleared` resolves it and owes Slack the resolve notice; a warning again while `cleared` reopens
it, so an instance has one early-warning incident however it flaps. The incident's rows are the
incidents room's to write (rca/incidents/warnings.py); the scan's own tables are written here.

Streaks and calm runs live in memory only: a restarted scheduler starts them again (a warning
then needs `sustain` scans more), while the states themselves are read back from the database.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from rca.domain.clock import utcnow
from rca.domain.early_warning import ALERTNAME, ORIGIN
from rca.domain.status import AlertStatus
from rca.domain.values import format_value
from rca.incidents.locks import after_change
from rca.incidents.queue import ALWAYS, queue
from rca.incidents.warnings import open_warning, set_warning
from rca.scan.fleet import ServingInstance
from rca.scan.slo_rules import Slo, slo_words
from rca.scan.states import WATCH_PROBABILITY, Assessment, Policy, ScanState, TargetMemory, Transition
from rca.signals.slo import TTFT_SIGNAL
from rca.store.models import IncidentRow, ScanTargetRow, ScanTransitionRow


@dataclass
class Actions:
    """What the caller does after the commit: enqueue these investigations, tell Slack of these resolves."""

    investigations: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)


def load_memories(session: Session) -> dict[str, TargetMemory]:
    """The stored states, as the scan's memory starts from them."""
    return {
        row.instance: TargetMemory(state=ScanState(row.state), since=row.since.timestamp(), incident_id=row.incident_id)
        for row in session.scalars(select(ScanTargetRow))
    }


def load_slos(session: Session) -> dict[str, Slo | None]:
    """The TTFT SLO stored with each instance, as the scan last wrote it (None: none stored yet)."""
    return {
        row.instance: Slo(row.slo_ttft_seconds, row.slo_source or "") if row.slo_ttft_seconds is not None else None
        for row in session.scalars(select(ScanTargetRow))
    }


def keep_slos(
    session: Session, changed: list[tuple[ServingInstance, Slo]], memories: dict[str, TargetMemory], at: float
) -> None:
    """Store each instance's TTFT SLO and its source on its row (one query reads the rows); an instance
    that never left `ok` gets its row now, in its state since `at`, so that every instance the scan
    judges is listed with the SLO it is judged against (`GET /api/v1/scan/targets`)."""
    if not changed:
        return
    instances = [serving.instance for serving, _ in changed]
    rows = {
        row.instance: row for row in session.scalars(select(ScanTargetRow).where(ScanTargetRow.instance.in_(instances)))
    }
    now = utcnow()
    for serving, slo in changed:
        row = rows.get(serving.instance)
        if row is None:
            memory = memories.get(serving.instance, TargetMemory())
            since = memory.since if memory.since is not None else at
            row = ScanTargetRow(
                instance=serving.instance,
                host=serving.host,
                state=memory.state,
                since=datetime.fromtimestamp(since, UTC),
                incident_id=memory.incident_id,
            )
            session.add(row)
        row.slo_ttft_seconds, row.slo_source, row.updated_at = slo.seconds, slo.source, now


def _when(ts: float | None) -> str:
    return f"{datetime.fromtimestamp(ts, UTC):%H:%M} UTC" if ts is not None else "now"


def summary(assessment: Assessment, policy: Policy) -> str:
    """The warning in words: which signals moved since when, the batch's forecast, and whether it
    came before the TTFT SLO broke or only with it (a sudden fault gives no early sign: a warning
    at the breach says so rather than claim a lead)."""
    parts = []
    for signal in assessment.degrading or assessment.crossing(policy.horizon_seconds):
        limit = signal.limit
        text = (
            f"{limit.title} {format_value(signal.current, limit.unit)} "
            f"(threshold {limit.comparison} {format_value(limit.threshold, limit.unit)}, "
            f"own baseline {format_value(signal.baseline, limit.unit)}), moving since {_when(signal.moving_since)}"
        )
        if signal.cross_in_seconds is not None:
            text += f", forecast to cross in ~{signal.cross_in_seconds / 60:.0f} min"
        parts.append(text)
    room = assessment.headroom
    if room is not None and room.filling(WATCH_PROBABILITY):
        parts.append(room.forecast())
    slo = assessment.slo
    ttft = next((s for s in assessment.signals if s.limit.signal == TTFT_SIGNAL), None)
    judged = [slo_words(ttft.limit.threshold, ttft.limit.slo_source)] if ttft and ttft.limit.slo_source else []
    if ttft is not None and ttft.breached:
        early = assessment.early_degrading or assessment.filling(policy)
        lead = "with early signals that moved with it" if early else "no early signal moved before the breach"
        return f"TTFT SLO breached, {lead}: " + "; ".join(parts + judged)
    if ttft is not None and ttft.cross_in_seconds is not None:
        forecast = f"TTFT SLO breach forecast in ~{ttft.cross_in_seconds / 60:.0f} min"
        if slo is not None and slo.probability is not None:
            forecast += f", p = {slo.probability:.2f}"
        parts.append(forecast)
    elif slo is not None and slo.probability is not None:
        parts.append(f"P(TTFT SLO breach within {policy.horizon_seconds / 60:.0f} min) = {slo.probability:.2f}")
    return "Early warning, before the TTFT SLO breaks: " + "; ".join(parts + judged)


def alert_labels(serving: ServingInstance) -> dict[str, str]:
    """The labels of a warning's own alert: the instance, as an SLA alert about it would name it."""
    labels = {"alertname": ALERTNAME, "instance": serving.instance, "host": serving.host, "severity": "warning"}
    return labels | ({"job": serving.job} if serving.job else {})


def record(
    session: Session,
    serving: ServingInstance,
    transition: Transition,
    memory: TargetMemory,
    assessment: Assessment,
    policy: Policy,
    *,
    owe_slack: bool,
    actions: Actions,
) -> TargetMemory:
    """Store a transition and act on it (open, reopen or resolve the incident); returns the memory
    with the incident it now refers to."""
    incident = session.get(IncidentRow, memory.incident_id) if memory.incident_id is not None else None
    resolved = False
    if transition.after == ScanState.WARNING:
        text = summary(assessment, policy)
        if incident is None:
            incident = open_warning(
                session,
                origin=ORIGIN,
                key=f"{ORIGIN}/{serving.instance}",
                title=f"Early warning: {serving.instance}",
                labels=alert_labels(serving),
                text=text,
                warned_at=datetime.fromtimestamp(assessment.at, UTC),
            )
        else:
            set_warning(session, incident, AlertStatus.FIRING, text)
        session.flush()
        queued = queue(session, incident.id, "early_warning", unless=ALWAYS)
        if queued.created:
            actions.investigations.append(queued.investigation_id)
    elif transition.after == ScanState.CLEARED and incident is not None:
        resolved = set_warning(session, incident, AlertStatus.RESOLVED)
        if resolved:
            actions.resolved.append(incident.id)
    incident_id = incident.id if incident is not None and transition.after != ScanState.OK else None
    if incident is not None:
        after_change(session, incident.id, owe_slack=resolved and owe_slack)
    at = datetime.fromtimestamp(transition.at, UTC)
    row = session.get(ScanTargetRow, serving.instance)
    if row is None:
        row = ScanTargetRow(instance=serving.instance)
        session.add(row)
    row.host, row.state, row.since, row.incident_id, row.updated_at = (
        serving.host,
        transition.after,
        at,
        incident_id,
        utcnow(),
    )
    session.add(transition_row(serving.instance, transition, incident.id if incident is not None else None))
    return replace(memory, incident_id=incident_id)


def transition_row(instance: str, transition: Transition, incident_id: int | None) -> ScanTransitionRow:
    """A transition as stored, with its reason and figures: the incident page's timeline reads them."""
    return ScanTransitionRow(
        instance=instance,
        before=transition.before,
        after=transition.after,
        at=datetime.fromtimestamp(transition.at, UTC),
        reason=transition.reason,
        figures=transition.figures,
        incident_id=incident_id,
    )
