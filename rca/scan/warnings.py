"""The scan's states kept in the database, and a warning turned into an incident.

Each scan advances every target's state in memory (`rca.scan.states`); only transitions are
written: the target's row in `scan_targets` and one `scan_transitions` row with the reason and
figures. A target entering `warning` opens an incident of origin `early_warning` with one alert
(labels naming the target, `startsAt` when its signals started to move) and a queued
investigation: the same pipeline as an Alertmanager alert (ranking, analyst, Slack, search).
`cleared` resolves it and owes Slack the resolve notice; a warning again while `cleared` reopens
it, so a target has one early-warning incident however it flaps.

Streaks and calm runs live in memory only: a restarted scheduler starts them again (a warning
then needs `sustain` scans more), while the states themselves are read back from the database.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from rca.domain.clock import utcnow
from rca.domain.early_warning import ALERTNAME, ORIGIN
from rca.domain.status import AlertStatus, InvestigationStatus
from rca.domain.values import format_value
from rca.scan.fleet import ServingTarget
from rca.scan.slo_rules import Slo, slo_words
from rca.scan.states import WATCH_PROBABILITY, Assessment, Policy, ScanState, TargetMemory, Transition
from rca.signals.slo import TTFT_SIGNAL
from rca.store import digests, notices
from rca.store.models import Alert, Incident, Investigation, ScanTarget, ScanTransition

RECEIVER = "rca-scan"


@dataclass
class Actions:
    """What the caller does after the commit: enqueue these investigations, tell Slack of these resolves."""

    investigations: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)


def load_memories(session: Session) -> dict[str, TargetMemory]:
    """The stored states, as the scan's memory starts from them."""
    return {
        row.instance: TargetMemory(state=ScanState(row.state), since=row.since.timestamp(), incident_id=row.incident_id)
        for row in session.scalars(select(ScanTarget))
    }


def load_slos(session: Session) -> dict[str, Slo | None]:
    """The TTFT SLO stored with each target, as the scan last wrote it (None: none stored yet)."""
    return {
        row.instance: Slo(row.slo_ttft_seconds, row.slo_source or "") if row.slo_ttft_seconds is not None else None
        for row in session.scalars(select(ScanTarget))
    }


def keep_slos(
    session: Session, changed: list[tuple[ServingTarget, Slo]], memories: dict[str, TargetMemory], at: float
) -> None:
    """Store each target's TTFT SLO and its source on its row (one query reads the rows); a target
    that never left `ok` gets its row now, in its state since `at`, so that every target the scan
    judges is listed with the SLO it is judged against (`GET /api/v1/scan/targets`)."""
    if not changed:
        return
    instances = [target.instance for target, _ in changed]
    rows = {row.instance: row for row in session.scalars(select(ScanTarget).where(ScanTarget.instance.in_(instances)))}
    now = utcnow()
    for target, slo in changed:
        row = rows.get(target.instance)
        if row is None:
            memory = memories.get(target.instance, TargetMemory())
            since = memory.since if memory.since is not None else at
            row = ScanTarget(
                instance=target.instance,
                host=target.host,
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


def alert_labels(target: ServingTarget) -> dict[str, str]:
    """The labels of a warning's own alert: the target, as an SLA alert about it would name it."""
    labels = {"alertname": ALERTNAME, "instance": target.instance, "host": target.host, "severity": "warning"}
    return labels | ({"job": target.job} if target.job else {})


def open_incident(
    session: Session, *, origin: str, key: str, title: str, labels: dict[str, str], text: str, warned_at: datetime
) -> Incident:
    """A warning's incident (group `key`) with its one firing alert, which starts when the scan
    warned; shared by the live scan and the backtest (`rca.scan.stored`)."""
    annotations = {"summary": text}
    incident = Incident(
        group_key=key,
        status=AlertStatus.FIRING,
        title=title,
        alertname=ALERTNAME,
        receiver=RECEIVER,
        group_labels={"instance": labels["instance"]},
        common_labels=labels,
        common_annotations=annotations,
        notification_count=0,
        origin=origin,
    )
    session.add(incident)
    session.flush()
    now = utcnow()
    session.add(
        Alert(
            incident_id=incident.id,
            fingerprint=hashlib.sha256(key.encode()).hexdigest()[:16],
            alertname=ALERTNAME,
            status=AlertStatus.FIRING,
            labels=labels,
            annotations=annotations,
            # When the scan warned, as Prometheus dates an alert from when it fired: the
            # investigation's "now" starts there (rca/signals/findings.current_since), so it judges
            # the signals as the scan did; when they started moving is in the summary and figures.
            starts_at=warned_at,
            raw={},
            first_seen_at=now,
            last_seen_at=now,
        )
    )
    return incident


def set_status(
    session: Session, incident: Incident, status: AlertStatus, text: str | None = None, at: datetime | None = None
) -> bool:
    """Fire or resolve the warning's own alert, and the incident with it unless an SLA alert that
    joined it still fires, `at` that time (default now); True when the incident changed status."""
    now = at or utcnow()
    for alert in incident.alerts:
        if alert.alertname == ALERTNAME:
            alert.status = status
            alert.ends_at = now if status == AlertStatus.RESOLVED else None
            alert.last_seen_at = now
    if text:
        incident.common_annotations = {**(incident.common_annotations or {}), "summary": text}
    incident.updated_at = now
    if status == AlertStatus.RESOLVED and any(a.status == AlertStatus.FIRING for a in incident.alerts):
        return False
    changed = incident.status != status
    incident.status = status
    incident.resolved_at = now if status == AlertStatus.RESOLVED else None
    return changed


def _queue_investigation(session: Session, incident: Incident) -> int:
    investigation = Investigation(
        incident_id=incident.id, status=InvestigationStatus.QUEUED, reason="early_warning", attempts=0
    )
    session.add(investigation)
    session.flush()
    return investigation.id


def record(
    session: Session,
    target: ServingTarget,
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
    incident = session.get(Incident, memory.incident_id) if memory.incident_id is not None else None
    if transition.after == ScanState.WARNING:
        text = summary(assessment, policy)
        if incident is None:
            incident = open_incident(
                session,
                origin=ORIGIN,
                key=f"{ORIGIN}/{target.instance}",
                title=f"Early warning: {target.instance}",
                labels=alert_labels(target),
                text=text,
                warned_at=datetime.fromtimestamp(assessment.at, UTC),
            )
        else:
            set_status(session, incident, AlertStatus.FIRING, text)
        session.flush()
        actions.investigations.append(_queue_investigation(session, incident))
    elif transition.after == ScanState.CLEARED and incident is not None:
        resolved = set_status(session, incident, AlertStatus.RESOLVED)
        session.flush()
        if resolved and owe_slack:
            notices.owe(session, incident.id)
        if resolved:
            actions.resolved.append(incident.id)
    incident_id = incident.id if incident is not None and transition.after != ScanState.OK else None
    if incident is not None:
        digests.refresh(session, incident.id)
    at = datetime.fromtimestamp(transition.at, UTC)
    row = session.get(ScanTarget, target.instance)
    if row is None:
        row = ScanTarget(instance=target.instance)
        session.add(row)
    row.host, row.state, row.since, row.incident_id, row.updated_at = (
        target.host,
        transition.after,
        at,
        incident_id,
        utcnow(),
    )
    session.add(transition_row(target.instance, transition, incident.id if incident is not None else None))
    return replace(memory, incident_id=incident_id)


def transition_row(instance: str, transition: Transition, incident_id: int | None) -> ScanTransition:
    """A transition as stored, with its reason and figures: the incident page's timeline reads them."""
    return ScanTransition(
        instance=instance,
        before=transition.before,
        after=transition.after,
        at=datetime.fromtimestamp(transition.at, UTC),
        reason=transition.reason,
        figures=transition.figures,
        incident_id=incident_id,
    )
