"""Slack notices owed: recorded in the transaction that gives Slack something to say, settled by the
delivery that brings the incident's message up to date, and swept when neither happened.

The enqueue of a Slack task comes after a commit, so a broker outage, a lost queue or a worker
that dies in between would drop the notice; the marker is committed with the cause instead. An
incident's `slack_owed` counts those transactions, and `slack_owed_since` is set while Slack is
behind. A delivery reads the count after it has locked the incident's `slack_deliveries` row, and
clears `slack_owed_since` only if the count is still what it read (compare and clear), so a notice
owed while it was talking to Slack stays owed. The sweeper claims what has been owed for longer
than a grace period and re-queues it, leasing it by moving `slack_owed_since` to now.

The marker lives on the incident, not on the delivery row, because a delivery holds that row
locked during its Slack calls: the investigation's commit and the webhook must not wait for them.
Neither transaction that owes locks the delivery row, and a delivery only writes the incident at
its end, so the two never wait on each other for long and never deadlock.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, literal, select, update
from sqlalchemy.orm import Session

from rca.domain.clock import utcnow
from rca.domain.early_warning import BACKTEST
from rca.domain.waiting import Waiting
from rca.store.models import IncidentRow, UTCDateTime

SWEEP_BATCH = 500


def owe(session: Session, incident_id: int) -> None:
    """Record, in the caller's transaction, that Slack is owed a notice about this incident; never
    about a backtest's (past warnings replayed: nobody is to be paged about them)."""
    session.execute(
        update(IncidentRow)
        .where(IncidentRow.id == incident_id, IncidentRow.origin != BACKTEST)
        .values(
            slack_owed=IncidentRow.slack_owed + 1,
            slack_owed_since=func.coalesce(IncidentRow.slack_owed_since, literal(utcnow(), UTCDateTime())),
        )
        .execution_options(synchronize_session=False)
    )


def settle(session: Session, incident_id: int, owed: int) -> bool:
    """Slack now shows everything owed up to count `owed` (read after the delivery row was locked):
    clear the marker, unless more was owed since. True when it was cleared."""
    result = session.execute(
        update(IncidentRow)
        .where(IncidentRow.id == incident_id, IncidentRow.slack_owed == owed, IncidentRow.slack_owed_since.is_not(None))
        .values(slack_owed_since=None)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


def defer(session: Session, incident_id: int, until: datetime) -> None:
    """A delivery will retry at `until` on its own: the sweeper leaves the notice to it till then."""
    session.execute(
        update(IncidentRow)
        .where(IncidentRow.id == incident_id, IncidentRow.slack_owed_since.is_not(None))
        .values(slack_owed_since=until)
        .execution_options(synchronize_session=False)
    )


def claim_owed(session: Session, older_than: timedelta) -> list[int]:
    """Incidents whose notice has been owed for longer than `older_than`, oldest first, leased:
    their marker moves to now, so the next sweep leaves them alone unless this re-queue is lost too.
    Rows another transaction holds (intake, an investigation's commit) are left for the next sweep."""
    now = utcnow()
    ids = list(
        session.scalars(
            select(IncidentRow.id)
            .where(IncidentRow.slack_owed_since < now - older_than)
            .order_by(IncidentRow.slack_owed_since, IncidentRow.id)
            .limit(SWEEP_BATCH)
            # NO KEY UPDATE: a delivery creating its row holds KEY SHARE on the incident (the
            # foreign key), which must not hide the incident from the sweep.
            .with_for_update(skip_locked=True, key_share=True)
        )
    )
    if ids:
        session.execute(
            update(IncidentRow)
            .where(IncidentRow.id.in_(ids))
            .values(slack_owed_since=now)
            .execution_options(synchronize_session=False)
        )
    return ids


def owed(session: Session) -> Waiting:
    """The incidents Slack still owes a notice, and how long the oldest has waited since it was
    owed or last handed to a delivery (a claim and a deferral move the marker): one query on the
    marker's index, cheap enough for every scrape."""
    count, oldest = session.execute(
        select(func.count(), func.min(IncidentRow.slack_owed_since)).where(IncidentRow.slack_owed_since.is_not(None))
    ).one()
    return Waiting.since(count, oldest)
