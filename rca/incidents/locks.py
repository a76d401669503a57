"""The order in which the room locks rows, written as code rather than a comment: two transactions
that touch the same incidents take their locks in the same order, so one waits for the other
instead of deadlocking.

1. Incidents: several at once in the order of their group keys (`lock_groups`), one by id
   (`lock_incident`).
2. Then the incident's own row again for what it owes Slack (`rca.store.notices.owe`), before
3. its search digest (`rca.store.digests.refresh`): `after_change` writes them in that order.

A transaction that owes a Slack notice never locks the incident's `slack_deliveries` row: a
delivery holds that row during its Slack calls and writes the incident only at its end
(rca/store/notices.py), so the two never wait on each other for long.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from rca.domain.status import AlertStatus
from rca.store import digests, notices
from rca.store.models import IncidentRow

# The open incidents of several groups, locked in the order of their keys. Built once: intake asks
# for every batch of webhooks.
OPEN_INCIDENTS = (
    select(IncidentRow)
    .where(IncidentRow.group_key.in_(bindparam("group_keys", expanding=True)), IncidentRow.status == AlertStatus.FIRING)
    .order_by(IncidentRow.group_key)
    .with_for_update()
)


def lock_groups(session: Session, group_keys: Sequence[str]) -> list[IncidentRow]:
    """The open incidents of these groups, locked in the order of their keys, in one round trip."""
    return list(session.scalars(OPEN_INCIDENTS, {"group_keys": sorted(group_keys)}))


def lock_incident(session: Session, incident_id: int) -> IncidentRow | None:
    """The incident's row, locked until the transaction ends; None when there is no such incident."""
    if session.get_bind().dialect.name == "sqlite":
        # No row locks, and the driver begins a transaction only at a write: write first (a no-op),
        # so that transactions at once take the database's one write lock in turn, each seeing the last's.
        session.execute(update(IncidentRow).where(IncidentRow.id == incident_id).values(id=IncidentRow.id))
    return session.get(IncidentRow, incident_id, with_for_update=True)


def after_change(session: Session, incident_id: int, *, owe_slack: bool, reindex: bool = True) -> None:
    """What follows a change of the incident, in lock order: its Slack notice owed (its own row,
    only with `owe_slack`), then its search digest rewritten (only with `reindex`)."""
    if owe_slack:
        session.flush()  # the incident's own changes first: `owe` updates its row directly
        notices.owe(session, incident_id)
    if reindex:
        digests.refresh(session, incident_id)
