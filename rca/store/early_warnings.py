"""Which early-warning incident an Alertmanager notification joins (rca/scan opens them).

When the SLA alert fires for a serving instance the scan already warned about, its alerts join the
warning's incident instead of opening a second one: the warning's investigation is already there,
and the alert's arrival shows how far ahead the warning was. Alerts already joined keep going
there (a repeat, a resolve), by fingerprint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BindParameter, CompoundSelect, bindparam, literal, or_, select, union_all
from sqlalchemy.orm import Session

from rca.domain.early_warning import ORIGIN
from rca.store.models import AlertRow, IncidentRow, ScanTargetRow, ScanTransitionRow

WARNING = "warning"  # rca.scan.states.ScanState.WARNING
_FINGERPRINTS: BindParameter[list[str]] = bindparam("fingerprints", expanding=True)
_INSTANCES: BindParameter[list[str]] = bindparam("instances", expanding=True)
_HOSTS: BindParameter[list[str]] = bindparam("hosts", expanding=True)
# Every candidate of every notification asked about, in one round trip, built once (intake asks for
# each new group): the early-warning incidents holding one of the fingerprints, and the warned
# targets named by one of the instances or hosts. Which one each notification joins is chosen in
# `joined_incidents`.
_CANDIDATES: CompoundSelect[Any] = union_all(
    select(literal("fingerprint"), AlertRow.fingerprint, literal(""), IncidentRow.id)
    .join(AlertRow, AlertRow.incident_id == IncidentRow.id)
    .where(IncidentRow.origin == ORIGIN, AlertRow.fingerprint.in_(_FINGERPRINTS)),
    select(
        literal("instance"), ScanTargetRow.host, ScanTargetRow.instance, ScanTargetRow.incident_id.label("id")
    ).where(
        ScanTargetRow.state == WARNING,
        ScanTargetRow.incident_id.is_not(None),
        or_(ScanTargetRow.instance.in_(_INSTANCES), ScanTargetRow.host.in_(_HOSTS)),
    ),
)


@dataclass(frozen=True)
class Named:
    """What one notification's alerts name: their fingerprints, `instance` labels and hosts."""

    fingerprints: Sequence[str]
    instances: Sequence[str]
    hosts: Sequence[str]


def joined_incidents(session: Session, asks: Sequence[Named]) -> list[int | None]:
    """For each notification, the early-warning incident it joins: the latest one holding one of
    its fingerprints, else the open warning of a serving instance it names (its exact `instance` first, else
    its host; the first instance in order among several)."""
    if not asks:
        return []
    params = {
        "fingerprints": sorted({f for ask in asks for f in ask.fingerprints}),
        "instances": sorted({i for ask in asks for i in ask.instances}),
        "hosts": sorted({h for ask in asks for h in ask.hosts}),
    }
    holding: dict[str, int] = {}
    warned: list[tuple[str, str, int]] = []  # (instance, host, incident)
    for by, name, instance, incident_id in session.execute(_CANDIDATES, params):
        if by == "fingerprint":
            holding[name] = max(incident_id, holding.get(name, incident_id))
        else:
            warned.append((instance, name, incident_id))
    warned.sort()
    return [_chosen(ask, holding, warned) for ask in asks]


def _chosen(ask: Named, holding: dict[str, int], warned: list[tuple[str, str, int]]) -> int | None:
    held = [holding[f] for f in ask.fingerprints if f in holding]
    if held:
        return max(held)
    exact = [incident for instance, _, incident in warned if instance in ask.instances]
    by_host = [incident for _, host, incident in warned if host in ask.hosts]
    return next(iter(exact or by_host), None)


def transitions(session: Session, incident_id: int) -> list[ScanTransitionRow]:
    """The scan's changes of state that concern this incident, oldest first: why it warned (the
    reason, and the figures of each signal then), cleared and warned again."""
    return list(
        session.scalars(
            select(ScanTransitionRow).where(ScanTransitionRow.incident_id == incident_id).order_by(ScanTransitionRow.id)
        )
    )


def targets(session: Session, state: str | None = None) -> list[ScanTargetRow]:
    """The scan's targets as stored, by instance; only those in `state` when given."""
    query = select(ScanTargetRow).order_by(ScanTargetRow.instance)
    if state is not None:
        query = query.where(ScanTargetRow.state == state)
    return list(session.scalars(query))
