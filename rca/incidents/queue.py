"""The one place an investigation is queued, with its one guard: not when the incident already has
one in the statuses the caller names (the newest such answers instead). The room records
"queued" in the caller's transaction; the caller hands the ids to the broker after the commit
(rca.jobs.dispatch), and the sweep re-sends one whose enqueue was lost.

What is queued is a round (rca.domain.hosts): given a `Fleet`, an incident whose firing alerts name
several hosts gets one investigation per host, sharing a `round_id`; otherwise (no fleet, or one
host) one investigation of the incident as one target, its host NULL, as always."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from rca.domain.hosts import Fleet, Round
from rca.domain.status import AlertStatus, InvestigationStatus
from rca.incidents.locks import lock_incident
from rca.store import bulk
from rca.store.models import AlertRow, Base, InvestigationRow

INVESTIGATIONS = Base.metadata.tables["investigations"]
# The guard's statuses, by caller. WAITING (new alerts): a queued one will see them; a running one
# may not have, so another is queued beside it. ACTIVE (someone asks to look again): one queued or
# running answers. ALWAYS (a warning again): a new episode of the scan is investigated on its own.
WAITING: tuple[str, ...] = (InvestigationStatus.QUEUED,)
ACTIVE: tuple[str, ...] = (InvestigationStatus.QUEUED, InvestigationStatus.RUNNING)
ALWAYS: tuple[str, ...] = ()
REQUESTED = "requested"  # the reason of an investigation someone asked for (API, page, CLI)


@dataclass(frozen=True)
class Requested:
    """What asking for an investigation of an incident got: a new round (`created`; its `ids`, the
    first being `investigation_id`), or the one already there that answers the request instead of
    another piling up, with the ids of the hosts that joined it (rca.domain.hosts). `ids`: what the
    caller enqueues after the commit."""

    investigation_id: int
    created: bool
    status: str
    requested_by: str | None
    ids: tuple[int, ...] = ()


def _rows(incident_id: int, reason: str, plan: Round, requested_by: str | None = None) -> list[dict[str, Any]]:
    """A round's queued investigations (the other columns have their defaults: no attempts yet)."""
    return [
        {
            "incident_id": incident_id,
            "status": InvestigationStatus.QUEUED,
            "reason": reason,
            "requested_by": requested_by,
            "attempts": 0,
            "host": host,
            "round_skipped": plan.skipped if plan.fleet else None,
        }
        for host in plan.hosts
    ]


def planned_round(fleet: Fleet | None, alerts: Sequence[tuple[Mapping[str, str], str]]) -> Round:
    """The round for an incident's alerts (labels, status): its firing ones (all of them when none
    fires), the alerts the investigation's claim reads; without a fleet, the incident as one."""
    firing = [labels for labels, status in alerts if status == AlertStatus.FIRING] or [labels for labels, _ in alerts]
    return fleet.round(firing) if fleet is not None else Round()


def _insert(session: Session, rounds: Sequence[list[dict[str, Any]]]) -> list[tuple[int, ...]]:
    """Insert the rounds' rows in one INSERT; a fleet's round shares its first id as `round_id`."""
    ids = bulk.insert_rows(session, INVESTIGATIONS, [row for rows in rounds for row in rows])
    out: list[tuple[int, ...]] = []
    for rows in rounds:
        out.append(tuple(ids[: len(rows)]))
        ids = ids[len(rows) :]
    shared = [(i, r[0]) for rows, r in zip(rounds, out, strict=True) if rows[0]["host"] is not None for i in r]
    if shared:
        session.execute(
            update(INVESTIGATIONS).where(INVESTIGATIONS.c.id == bindparam("_id")),
            [{"_id": i, "round_id": first} for i, first in shared],
        )
    return out


def queue_new(
    session: Session, incident_ids: Sequence[int], reason: str, rounds: Sequence[Round] | None = None
) -> list[tuple[int, ...]]:
    """Queue a round for each of these incidents, opened in this transaction (so none has one to
    guard against), in one INSERT: intake's hot path, which knows their alerts (`planned_round` of them;
    default: each incident as one target). Each round's ids, in order."""
    plans = rounds if rounds is not None else [Round() for _ in incident_ids]
    return _insert(session, [_rows(i, reason, plan) for i, plan in zip(incident_ids, plans, strict=True)])


def queue(
    session: Session,
    incident_id: int,
    reason: str,
    *,
    unless: Sequence[str],
    requested_by: str | None = None,
    fleet: Fleet | None = None,
) -> Requested:
    """Queue a round of investigations of the incident (one per host with a `fleet`), unless it has
    one in the `unless` statuses already (the newest such answers). With a guard, the caller holds
    the incident's lock (`rca.incidents.locks`), so that two at once queue one: intake and
    `investigate_again` do."""
    waiting = (
        session.execute(
            select(InvestigationRow.id, InvestigationRow.status, InvestigationRow.requested_by)
            .where(InvestigationRow.incident_id == incident_id, InvestigationRow.status.in_(unless))
            .order_by(InvestigationRow.id.desc())
            .limit(1)
        ).first()
        if unless  # ALWAYS asks nothing
        else None
    )
    plan = Round()
    if fleet is not None:
        alerts = session.execute(
            select(AlertRow.labels, AlertRow.status).where(AlertRow.incident_id == incident_id)
        ).all()
        plan = planned_round(fleet, [(row.labels, row.status) for row in alerts])
    if waiting is not None:
        joined = _join(session, waiting.id, plan, fleet.max_hosts) if fleet is not None and plan.fleet else ()
        return Requested(waiting.id, False, waiting.status, waiting.requested_by, joined)
    [ids] = _insert(session, [_rows(incident_id, reason, plan, requested_by)])
    return Requested(ids[0], True, InvestigationStatus.QUEUED, requested_by, ids)


def _join(session: Session, waiting_id: int, plan: Round, max_hosts: int) -> tuple[int, ...]:
    """The hosts the waiting round does not cover join it, up to `max_hosts` in all: a host whose
    alerts arrive while its incident's round waits is investigated in that round, not never. A
    whole-incident investigation still queued becomes the round's first host's; a running one
    answers as it is. The ids that joined."""
    first = session.get_one(InvestigationRow, waiting_id)
    if first.round_id is None:
        if first.host is not None or first.status != InvestigationStatus.QUEUED:
            return ()
        first.host, first.round_id = plan.hosts[0], first.id
        session.flush()
    round_id = first.round_id
    covered = set(session.scalars(select(InvestigationRow.host).where(InvestigationRow.round_id == round_id)))
    missing = [host for host in plan.hosts if host not in covered][: max(0, max_hosts - len(covered))]
    rows = _rows(first.incident_id, first.reason, Round(tuple(missing)), first.requested_by)
    ids = bulk.insert_rows(session, INVESTIGATIONS, [row | {"round_id": round_id} for row in rows])
    skipped = max(0, len(plan.hosts) + plan.skipped - len(covered) - len(missing))
    session.execute(update(INVESTIGATIONS).where(INVESTIGATIONS.c.round_id == round_id).values(round_skipped=skipped))
    return tuple(ids)


def investigate_again(
    session: Session,
    incident_id: int,
    reason: str = REQUESTED,
    requested_by: str | None = None,
    *,
    unless: Sequence[str] = ACTIVE,
    fleet: Fleet | None = None,
) -> Requested | None:
    """Queue a fresh round of the incident now (every host again, with a `fleet`), firing or
    resolved (an engineer fixed RCA_PROMETHEUS_URL after it resolved; `rca demo` runs again on its
    one incident), beside the earlier ones; unless one is queued or running already (`unless`),
    which answers instead. None when there is no such incident. The incident's row is locked first,
    so that two requests at once queue one."""
    if lock_incident(session, incident_id) is None:
        return None
    return queue(session, incident_id, reason, unless=unless, requested_by=requested_by, fleet=fleet)
