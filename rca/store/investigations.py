"""Investigation state changes: claim, save the result, fail, find the ones left behind.

One run at a time. A claim is leased (`lease_until`, renewed by the running job); a second claim
while the lease holds is refused, so a message that Redis redelivers while its run is still alive
starts no second run. `attempts` counts the runs handed out (claims of a `queued` investigation);
once `max_attempts` of them were stranded, the sweep closes it as failed instead of re-queueing
it forever. What the incident owes after each change (its Slack notice, its search digest) is
rca.incidents.investigations'."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, exists, func, select, update
from sqlalchemy.orm import Session

from rca.domain.clock import utcnow
from rca.domain.result import InvestigationResult
from rca.domain.status import AlertStatus, Analyst, InvestigationStatus
from rca.domain.waiting import Waiting
from rca.store.models import AlertRow, FindingRow, HypothesisRow, InvestigationRow

FINISHED = (InvestigationStatus.DONE, InvestigationStatus.INCONCLUSIVE, InvestigationStatus.FAILED)
STRANDED_BATCH = 500
CRASHED = "its worker stopped without finishing it each time (a crash, the time limit, or its retries used up)"


@dataclass(frozen=True)
class Claim:
    """What a worker needs to run an investigation, read while the row was claimed."""

    investigation_id: int
    incident_id: int
    incident_created_at: datetime
    alert_labels: list[dict[str, str]]
    alert_starts: list[datetime]
    alert_annotations: list[dict[str, str]] = field(default_factory=list)
    host: str | None = None  # a fleet incident's host this investigation is about (None: the whole incident)
    round_id: int | None = None  # its round's (the id of the round's first investigation)


def claim(session: Session, investigation_id: int, lease: timedelta | None = None) -> Claim | None:
    """Mark the investigation running, or return None if it is finished, unknown, or running under
    a lease that has not lapsed (another run is alive: a redelivered message must not start a
    second). With `lease`, the claim lasts that long unless renewed (`renew_lease`): the sweep
    hands a running investigation whose lease lapsed to another worker."""
    inv = session.get(InvestigationRow, investigation_id, with_for_update=True)
    if inv is None or inv.status in FINISHED:
        return None
    now = utcnow()
    if inv.status == InvestigationStatus.RUNNING and inv.lease_until is not None and inv.lease_until > now:
        return None
    alerts = session.scalars(select(AlertRow).where(AlertRow.incident_id == inv.incident_id)).all()
    firing = [a for a in alerts if a.status == AlertStatus.FIRING] or list(alerts)
    if inv.status == InvestigationStatus.QUEUED:
        inv.attempts += 1  # a run handed out; a retry of the same run (still `running`) is not another
    inv.status = InvestigationStatus.RUNNING
    inv.started_at = now
    inv.lease_until = now + lease if lease is not None else None
    return Claim(
        investigation_id,
        inv.incident_id,
        inv.incident.created_at,
        [a.labels for a in firing],
        [a.starts_at for a in firing],
        [a.annotations for a in firing],
        inv.host,
        inv.round_id,
    )


# AnalystRecord field -> investigation column, where the column says whose figure it is.
RECORD_COLUMNS = {
    "model": "llm_model",
    "output_mode": "llm_output_mode",
    "latency_seconds": "llm_latency_seconds",
    "trimmed": "prompt_trimmed",
    "dropped": "llm_dropped",
    "exchange": "llm_exchange",
}
NOT_STORED = {"score"}  # the rules' internal score of a hypothesis


def save_result(session: Session, investigation_id: int, result: InvestigationResult) -> int:
    """Replace the investigation's findings and hypotheses with this result, and close it: `done`,
    or `inconclusive` with its reason and no hypotheses when the result read no evidence. Returns
    its incident's id: what the incident owes after it (Slack, the search digest) is the incidents
    room's (rca.incidents.investigations.finish)."""
    inv = session.get(InvestigationRow, investigation_id, with_for_update=True)
    if inv is None:
        raise LookupError(f"investigation {investigation_id} vanished")
    session.execute(delete(FindingRow).where(FindingRow.investigation_id == investigation_id))
    session.execute(delete(HypothesisRow).where(HypothesisRow.investigation_id == investigation_id))
    session.add_all(FindingRow(investigation_id=investigation_id, **asdict(f)) for f in result.findings)
    blind = result.inconclusive is not None
    if not blind:  # a blind result never stores a cause, whatever its hypotheses say
        session.add_all(
            HypothesisRow(investigation_id=investigation_id, **_stored(asdict(h))) for h in result.hypotheses
        )
    inv.status = InvestigationStatus.INCONCLUSIVE if blind else InvestigationStatus.DONE
    inv.inconclusive_reason = result.inconclusive
    inv.finished_at, inv.lease_until = utcnow(), None
    inv.collect_seconds = round(result.collect_seconds, 4)
    inv.total_seconds = round(result.total_seconds, 4)
    inv.analyst = Analyst.RULES
    if result.analyst is not None:
        for name, value in asdict(result.analyst).items():
            setattr(inv, RECORD_COLUMNS.get(name, name), value)
    if blind:
        inv.analyst = None  # nobody wrote a cause
    inv.window_start, inv.window_end, inv.step_seconds = result.window_start, result.window_end, result.step_seconds
    inv.target, inv.error, inv.change_key = result.target, result.error, result.change_key
    inv.common_factor = result.common_factor
    return inv.incident_id


def renew_lease(session: Session, investigation_id: int, lease: timedelta) -> bool:
    """Extend a running investigation's lease to now + `lease`; False when it is no longer running."""
    result = session.execute(
        update(InvestigationRow)
        .where(InvestigationRow.id == investigation_id, InvestigationRow.status == InvestigationStatus.RUNNING)
        .values(lease_until=utcnow() + lease)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


def release(session: Session, investigation_id: int, error: str, claimed_since: datetime) -> None:
    """A run stopped on an error its runner retries: end its lease now, so that the retry (or the
    sweep) can claim it at once, and keep the error as the reason should it never finish. Only a
    claim made since `claimed_since` (the run's own) is released, never an earlier live run's."""
    session.execute(
        update(InvestigationRow)
        .where(
            InvestigationRow.id == investigation_id,
            InvestigationRow.status == InvestigationStatus.RUNNING,
            InvestigationRow.started_at >= claimed_since,
        )
        .values(lease_until=utcnow(), error=error[:2000])
        .execution_options(synchronize_session=False)
    )


def _stored(data: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in data.items() if name not in NOT_STORED}


def mark_failed(session: Session, investigation_id: int, error: str) -> int | None:
    """Close the investigation as `failed` with its reason; its incident's id, or None when it was
    already finished (the notice that says it failed is the incidents room's to owe)."""
    inv = session.get(InvestigationRow, investigation_id, with_for_update=True)
    if inv is None or inv.status in FINISHED:
        return None
    inv.status, inv.error = InvestigationStatus.FAILED, error[:2000]
    inv.finished_at, inv.lease_until = utcnow(), None
    return inv.incident_id


@dataclass(frozen=True)
class Stranded:
    """What one sweep found: investigations to enqueue again, and the incidents of those given up."""

    requeued: list[int] = field(default_factory=list)  # investigation ids
    gave_up: list[int] = field(default_factory=list)  # incident ids; their Slack notice is owed


def stranded(
    session: Session,
    older_than: timedelta,
    max_attempts: int = 3,
    *,
    held: Callable[[], Collection[int] | None] | None = None,
) -> Stranded:
    """Claim investigations still queued after `older_than` (their enqueue was lost, e.g. because
    the broker was down when the webhook arrived) unless the broker still holds them (waiting
    behind a backlog, or with a worker: late, not lost; `held` reads which, asked only when some
    queued one is old enough to be in doubt), and running ones whose lease lapsed (the
    worker running it died: its heartbeat stopped). A claim from before leases is judged by its age.

    Those already handed out `max_attempts` times are not re-queued: they are closed as failed,
    saying why (the last error, or that their worker stopped each time); their incidents are
    `gave_up`, for the caller to owe their notice."""
    now = utcnow()
    cutoff = now - older_than
    queued = (InvestigationRow.status == InvestigationStatus.QUEUED) & (InvestigationRow.queued_at < cutoff)
    if held is not None and session.scalar(select(exists().where(queued))):
        in_broker = held()
        if in_broker:
            queued = queued & InvestigationRow.id.not_in(list(in_broker))
    lapsed = InvestigationRow.lease_until < now
    unleased_and_old = InvestigationRow.lease_until.is_(None) & (InvestigationRow.started_at < cutoff - older_than * 4)
    running = (InvestigationRow.status == InvestigationStatus.RUNNING) & (lapsed | unleased_and_old)
    found = session.scalars(
        select(InvestigationRow)
        .where(queued | running)
        .order_by(InvestigationRow.id)
        .limit(STRANDED_BATCH)
        .with_for_update(skip_locked=True)
    ).all()
    result = Stranded()
    for inv in found:
        if inv.attempts >= max_attempts:
            reason = f"gave up after {inv.attempts} attempts: {inv.error or CRASHED}"
            mark_failed(session, inv.id, reason)
            result.gave_up.append(inv.incident_id)
        else:
            # Re-queued now, so the next sweep leaves it alone unless this enqueue is lost too.
            inv.status, inv.queued_at, inv.lease_until = InvestigationStatus.QUEUED, now, None
            result.requeued.append(inv.id)
    return result


def queued(session: Session) -> Waiting:
    """The investigations still queued, and how long the oldest has waited: one query on the
    status index, cheap enough for every scrape."""
    count, oldest = session.execute(
        select(func.count(), func.min(InvestigationRow.queued_at)).where(
            InvestigationRow.status == InvestigationStatus.QUEUED
        )
    ).one()
    return Waiting.since(count, oldest)
