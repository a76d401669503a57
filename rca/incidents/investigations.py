"""An investigation's life as its incident sees it: claimed, kept leased, released for a retry,
finished or failed, and handed back by the sweep. The rows are the store's
(rca/store/investigations.py); what the incident owes after each end (its Slack notice, its search
digest) is written here, through `locks.after_change`, in the room's lock order: the
investigation's row, then the incident's, then its digest.

The runner (rca/jobs/runner.py) and the sweep (rca/jobs/sweep.py) call this module and no table
of an investigation directly, so that one walk of an investigation enters the store through one door.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import timedelta

from sqlalchemy.orm import Session

from rca.domain.result import InvestigationResult
from rca.domain.series import EvidenceSeries
from rca.incidents.locks import after_change
from rca.store import evidence
from rca.store import investigations as rows
from rca.store.investigations import Claim, Stranded, claim, release, renew_lease

__all__ = ["Claim", "Stranded", "claim", "fail", "finish", "release", "renew_lease", "stranded"]


def finish(
    session: Session,
    investigation_id: int,
    result: InvestigationResult,
    series: list[EvidenceSeries],
    *,
    owe_slack: bool,
) -> None:
    """Store the result and its findings' series, and close the investigation (`done`, or
    `inconclusive` when it read no evidence); the incident then owes Slack its notice (with
    `owe_slack`: Slack is configured), in the same transaction so that no lost enqueue can drop
    it, and its search digest is rewritten with the new findings."""
    incident_id = rows.save_result(session, investigation_id, result)
    evidence.save(session, investigation_id, series)
    after_change(session, incident_id, owe_slack=owe_slack)


def fail(session: Session, investigation_id: int, error: str, *, owe_slack: bool) -> bool:
    """Close the investigation as `failed` with its reason, owing Slack the notice that says so;
    False when it was already finished (nothing changes then)."""
    incident_id = rows.mark_failed(session, investigation_id, error)
    if incident_id is None:
        return False
    after_change(session, incident_id, owe_slack=owe_slack, reindex=False)
    return True


def stranded(
    session: Session,
    older_than: timedelta,
    max_attempts: int,
    *,
    owe_slack: bool,
    held: Callable[[], Collection[int] | None] | None = None,
) -> Stranded:
    """The sweep's find (rca.store.investigations.stranded: lost enqueues and lapsed leases to
    re-queue, those handed out `max_attempts` times closed as failed); each incident given up on
    owes Slack the notice that says its investigation failed."""
    found = rows.stranded(session, older_than, max_attempts, held=held)
    for incident_id in dict.fromkeys(found.gave_up):
        after_change(session, incident_id, owe_slack=owe_slack, reindex=False)
    return found
